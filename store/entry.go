package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tidwall/gjson"

	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/internal/jsonenc"
)

// encodeEntry returns the stored form of an outbox entry, payload or dead
// letter: the length of the metadata, the metadata as encoding/json writes
// it (FuzzEncode), then the body as raw bytes. The metadata reads without
// the body, and a body costs no base64. It is written by hand in one
// buffer, as this runs at every accepted delivery.
func encodeEntry(e *forward.Entry) ([]byte, error) {
	// The metadata's length goes before it; room is left for the longest.
	const room = binary.MaxVarintLen64
	b, err := appendMeta(make([]byte, room, room+256+len(e.Body)), e)
	if err != nil {
		return nil, fmt.Errorf("encode entry: %w", err)
	}
	var n [binary.MaxVarintLen64]byte
	size := binary.PutUvarint(n[:], uint64(len(b)-room))
	start := room - size
	copy(b[start:], n[:size])
	return append(b, e.Body...)[start:], nil
}

// appendMeta appends e's metadata as encoding/json writes it.
func appendMeta(b []byte, e *forward.Entry) ([]byte, error) {
	w := jsonenc.Encoder{B: b}
	w.Raw(`{"source":`)
	w.String(e.Source)
	w.Raw(`,"route":`)
	w.String(e.Route)
	w.Raw(`,"request_id":`)
	w.String(e.RequestID)
	w.OmitEmpty(`,"resource":`, e.Resource)
	w.OmitEmpty(`,"version":`, e.Version)
	w.OmitEmpty(`,"content_type":`, e.ContentType)
	if len(e.Headers) > 0 {
		w.Raw(`,"headers":{`)
		for i, k := range slices.Sorted(maps.Keys(e.Headers)) {
			if i > 0 {
				w.Raw(",")
			}
			w.String(k)
			w.Raw(":")
			w.String(e.Headers[k])
		}
		w.Raw("}")
	}
	w.OmitEmpty(`,"trace":`, e.Trace)
	w.Raw(`,"created_at":`)
	w.Time(e.CreatedAt)
	w.Raw(`,"attempts":`)
	w.Int(e.Attempts)
	w.Raw(`,"next_attempt_at":`)
	w.Time(e.NextAttemptAt)
	if e.LastStatus != 0 {
		w.Raw(`,"last_status":`)
		w.Int(e.LastStatus)
	}
	w.OmitEmpty(`,"last_error":`, e.LastError)
	if e.DeadAt != nil {
		w.Raw(`,"dead_at":`)
		w.Time(*e.DeadAt)
	}
	if e.BodyLost {
		w.Raw(`,"body_lost":true`)
	}
	w.Raw("}")
	return w.B, w.Err
}

// decodeEntryValue reads an encoded entry into e; withBody false leaves
// Body nil. The entry keeps no reference to b.
func decodeEntryValue(b []byte, withBody bool, e *forward.Entry) error {
	meta, body, err := splitEntry(b)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(meta, e); err != nil {
		return fmt.Errorf("decode entry: %w", err)
	}
	if withBody {
		e.Body = bytes.Clone(body) // not nil, even when empty
	}
	return nil
}

// decodeBody returns a copy of an encoded entry's body, not nil even when
// empty, and its created_at, without decoding the rest of its metadata.
func decodeBody(b []byte) (body []byte, createdAt time.Time, err error) {
	meta, body, err := splitEntry(b)
	if err != nil {
		return nil, time.Time{}, err
	}
	createdAt, _ = time.Parse(time.RFC3339Nano, gjson.GetBytes(meta, "created_at").Str)
	return bytes.Clone(body), createdAt, nil
}

// entryTarget returns the target of an encoded entry, without decoding
// the rest of it.
func entryTarget(b []byte) (forward.Target, error) {
	meta, _, err := splitEntry(b)
	if err != nil {
		return forward.Target{}, err
	}
	f := gjson.GetManyBytes(meta, "source", "route")
	return forward.Target{Source: f[0].Str, Route: f[1].Str}, nil
}

func splitEntry(b []byte) (meta, body []byte, err error) {
	n, size := binary.Uvarint(b)
	if size <= 0 || uint64(len(b)-size) < n {
		return nil, nil, errors.New("decode entry: bad length")
	}
	return b[size : size+int(n)], b[size+int(n):], nil
}
