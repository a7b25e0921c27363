package forward

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
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
// a body costs no base64.
func (e *Entry) Encode() ([]byte, error) {
	meta, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode entry: %w", err)
	}
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen32+len(meta)+len(e.Body)), uint64(len(meta)))
	b = append(b, meta...)
	return append(b, e.Body...), nil
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
// empty, without decoding its metadata.
func DecodeBody(b []byte) ([]byte, error) {
	_, body, err := split(b)
	return bytes.Clone(body), err
}

func split(b []byte) (meta, body []byte, err error) {
	n, size := binary.Uvarint(b)
	if size <= 0 || uint64(len(b)-size) < n {
		return nil, nil, errors.New("decode entry: bad length")
	}
	return b[size : size+int(n)], b[size+int(n):], nil
}
