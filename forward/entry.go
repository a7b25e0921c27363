package forward

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

	"github.com/webhookd/webhookd/internal/jsonenc"
)

// Entry is one accepted delivery waiting to be forwarded. Entries of one
// resource are created in version order (the stale rule refuses anything
// else), so their outbox order is their version order.
type Entry struct {
	Seq           uint64            `json:"-"` // outbox position, from the key
	Source        string            `json:"source"`
	RequestID     string            `json:"request_id"`
	Resource      string            `json:"resource,omitempty"`
	Version       string            `json:"version,omitempty"`
	ContentType   string            `json:"content_type,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	Attempts      int               `json:"attempts"`
	NextAttemptAt time.Time         `json:"next_attempt_at"`
	LastStatus    int               `json:"last_status,omitempty"`
	LastError     string            `json:"last_error,omitempty"`
	DeadAt        *time.Time        `json:"dead_at,omitempty"`
	// BodyLost marks a dead letter whose payload expired before it was
	// forwarded: there is nothing left to send.
	BodyLost bool   `json:"body_lost,omitempty"`
	Body     []byte `json:"-"` // nil when not read; an empty body is empty, not nil
}

// Encode stores the body as raw bytes after the JSON metadata, so that the
// forwarder's scheduler can read an entry's metadata without its body and
// a body costs no base64. The metadata is written by hand, in one buffer
// with its length and the body: encoding/json took 3 % of the CPU with
// forwarding on. It is the bytes encoding/json writes (FuzzEncode), and
// Decode reads it with encoding/json.
func (e *Entry) Encode() ([]byte, error) {
	// The metadata's length goes before it; room is left for the longest.
	const room = binary.MaxVarintLen64
	b, err := e.appendMeta(make([]byte, room, room+256+len(e.Body)))
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
func (e *Entry) appendMeta(b []byte) ([]byte, error) {
	w := jsonenc.Encoder{B: b}
	w.Raw(`{"source":`)
	w.String(e.Source)
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

// Decode reads an encoded entry; withBody false leaves Body nil. The entry
// keeps no reference to b.
func (e *Entry) Decode(b []byte, withBody bool) error {
	meta, body, err := split(b)
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

// DecodeBody returns a copy of an encoded entry's body, not nil even when
// empty, and its created_at (zero if it has none), without decoding the
// rest of its metadata.
func DecodeBody(b []byte) (body []byte, createdAt time.Time, err error) {
	meta, body, err := split(b)
	if err != nil {
		return nil, time.Time{}, err
	}
	createdAt, _ = time.Parse(time.RFC3339Nano, gjson.GetBytes(meta, "created_at").Str)
	return bytes.Clone(body), createdAt, nil
}

func split(b []byte) (meta, body []byte, err error) {
	n, size := binary.Uvarint(b)
	if size <= 0 || uint64(len(b)-size) < n {
		return nil, nil, errors.New("decode entry: bad length")
	}
	return b[size : size+int(n)], b[size+int(n):], nil
}
