package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/webhookd/webhookd/forward"
)

// encodeEntry returns the stored form of an outbox entry, payload or dead
// letter: the length of the metadata, the metadata in the records' binary
// form (record.go), then the body as raw bytes. The metadata reads without
// the body, and a body costs no encoding. An outbox entry is metadata only
// and stays in Badger's LSM tree for as long as it waits, so a backlog's
// compactions move these bytes: the binary form takes about a third of
// the bytes JSON would.
func encodeEntry(e *forward.Entry) []byte {
	// The metadata's length goes before it; room is left for the longest.
	const room = binary.MaxVarintLen64
	b := appendMeta(make([]byte, room, room+128+len(e.Body)), e)
	var n [binary.MaxVarintLen64]byte
	size := binary.PutUvarint(n[:], uint64(len(b)-room))
	start := room - size
	copy(b[start:], n[:size])
	return append(b, e.Body...)[start:]
}

// appendMeta appends e's metadata. created_at, source and route come
// first, so that decodeBody and entryTarget read no further.
func appendMeta(b []byte, e *forward.Entry) []byte {
	b = append(b, tagEntry)
	b = appendTime(b, e.CreatedAt)
	b = appendString(b, e.Source)
	b = appendString(b, e.Route)
	b = appendString(b, e.RequestID)
	b = appendString(b, e.Resource)
	b = appendString(b, e.Version)
	b = appendString(b, e.ContentType)
	b = binary.AppendUvarint(b, uint64(len(e.Headers)))
	for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
		b = appendString(appendString(b, k), e.Headers[k])
	}
	b = appendString(b, e.Trace)
	b = binary.AppendVarint(b, int64(e.Attempts))
	b = appendTime(b, e.NextAttemptAt)
	b = binary.AppendVarint(b, int64(e.LastStatus))
	b = appendString(b, e.LastError)
	b = appendTimePtr(b, e.DeadAt)
	if e.BodyLost {
		return append(b, 1)
	}
	return append(b, 0)
}

// decodeEntryValue reads an encoded entry into e; withBody false leaves
// Body nil. The entry keeps no reference to b.
func decodeEntryValue(b []byte, withBody bool, e *forward.Entry) error {
	r, body, err := openEntry(b)
	if err != nil {
		return err
	}
	e.CreatedAt = r.time("created_at")
	e.Source = r.string("source")
	e.Route = r.string("route")
	e.RequestID = r.string("request_id")
	e.Resource = r.string("resource")
	e.Version = r.string("version")
	e.ContentType = r.string("content_type")
	if n := r.uvarint("headers"); n > 0 {
		// Each header takes two bytes at least: a forged count must not
		// allocate more than the metadata could hold.
		if n > uint64(len(r.b))/2 {
			r.fail("headers")
		} else {
			e.Headers = make(map[string]string, n)
			for range n {
				k := r.string("header name")
				e.Headers[k] = r.string("header value")
			}
		}
	}
	e.Trace = r.string("trace")
	e.Attempts = r.int("attempts")
	e.NextAttemptAt = r.time("next_attempt_at")
	e.LastStatus = r.int("last_status")
	e.LastError = r.string("last_error")
	e.DeadAt = r.timePtr("dead_at")
	switch r.byte("body_lost") {
	case 0:
	case 1:
		e.BodyLost = true
	default:
		r.fail("body_lost")
	}
	if err := r.end(); err != nil {
		return fmt.Errorf("decode entry: %w", err)
	}
	if withBody {
		e.Body = bytes.Clone(body) // not nil, even when empty
	}
	return nil
}

// openEntry splits an encoded entry into a reader of its metadata, past
// the tag, and its body. A bad tag is the reader's first error.
func openEntry(b []byte) (r reader, body []byte, err error) {
	meta, body, err := splitEntry(b)
	if err != nil {
		return r, nil, err
	}
	if len(meta) == 0 {
		return r, nil, fmt.Errorf("decode entry: %w: empty", errMalformed)
	}
	r = reader{b: meta[1:]}
	r.expect(meta[0], tagEntry)
	return r, body, nil
}

// decodeBody returns a copy of an encoded entry's body, not nil even when
// empty, and its created_at, without decoding the rest of its metadata.
func decodeBody(b []byte) (body []byte, createdAt time.Time, err error) {
	r, body, err := openEntry(b)
	if err != nil {
		return nil, time.Time{}, err
	}
	createdAt = r.time("created_at")
	if r.err != nil {
		return nil, time.Time{}, fmt.Errorf("decode entry: %w", r.err)
	}
	return bytes.Clone(body), createdAt, nil
}

// entryTarget returns the target of an encoded entry, without decoding
// the rest of it.
func entryTarget(b []byte) (forward.Target, error) {
	r, _, err := openEntry(b)
	if err != nil {
		return forward.Target{}, err
	}
	r.time("created_at")
	tg := forward.Target{Source: r.string("source"), Route: r.string("route")}
	if r.err != nil {
		return forward.Target{}, fmt.Errorf("decode entry: %w", r.err)
	}
	return tg, nil
}

func splitEntry(b []byte) (meta, body []byte, err error) {
	n, size := binary.Uvarint(b)
	if size <= 0 || uint64(len(b)-size) < n {
		return nil, nil, errors.New("decode entry: bad length")
	}
	return b[size : size+int(n)], b[size+int(n):], nil
}
