package store

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/versioning"
)

// encode returns v as JSON. Receipts and latest versions, written at every
// decision, and forward statuses, written at every forward attempt, are
// encoded without reflection: encoding/json spent about 4 µs a decision on
// the first two, 7 % of the CPU at intake. The hand-written encoders write
// exactly the bytes encoding/json writes (FuzzEncode compares them), so
// stored records do not depend on which one wrote them, and they are read
// back with encoding/json.
func encode(v any) ([]byte, error) {
	var e encoder
	switch v := v.(type) {
	case *dedupe.Receipt:
		e.b = make([]byte, 0, 640+128*len(v.Deliveries))
		e.receipt(v)
	case *versioning.Latest:
		e.b = make([]byte, 0, 128)
		e.latest(v)
	case *webhookd.ForwardStatus:
		e.b = make([]byte, 0, 128)
		e.forward(v)
	default:
		return json.Marshal(v)
	}
	return e.b, e.err
}

// encoder appends JSON to b; the first error sticks.
type encoder struct {
	b   []byte
	err error
}

func (e *encoder) receipt(r *dedupe.Receipt) {
	e.raw(`{"source":`)
	e.string(r.Source)
	e.raw(`,"request_id":`)
	e.string(r.RequestID)
	e.omitEmpty(`,"resource":`, r.Resource)
	e.omitEmpty(`,"version":`, r.Version)
	e.raw(`,"decision":`)
	e.string(string(r.Decision))
	e.raw(`,"reason":`)
	e.string(r.Reason)
	e.raw(`,"duplicate_decision":`)
	e.string(string(r.DuplicateDecision))
	e.raw(`,"ordering_decision":`)
	e.string(r.OrderingDecision)
	e.omitEmpty(`,"latest_version_at_decision":`, r.LatestVersionAtDecision)
	e.raw(`,"payload_sha256":`)
	e.string(r.PayloadSHA256)
	e.raw(`,"first_seen":`)
	e.time(r.FirstSeen)
	e.raw(`,"last_seen":`)
	e.time(r.LastSeen)
	e.raw(`,"attempts":`)
	e.int(r.Attempts)
	e.raw(`,"deliveries":`)
	if r.Deliveries == nil {
		e.raw("null")
	} else {
		e.raw("[")
		for i, d := range r.Deliveries {
			if i > 0 {
				e.raw(",")
			}
			e.raw(`{"delivery_id":`)
			e.string(d.DeliveryID)
			e.raw(`,"received_at":`)
			e.time(d.ReceivedAt)
			e.raw(`,"decision":`)
			e.string(string(d.Decision))
			e.raw("}")
		}
		e.raw("]")
	}
	e.raw(`,"forward":`)
	e.forward(&r.Forward)
	e.raw("}")
}

func (e *encoder) forward(f *webhookd.ForwardStatus) {
	e.raw(`{"state":`)
	e.string(string(f.State))
	e.raw(`,"attempts":`)
	e.int(f.Attempts)
	if f.LastStatus != 0 {
		e.raw(`,"last_status":`)
		e.int(f.LastStatus)
	}
	e.omitEmpty(`,"last_error":`, f.LastError)
	if f.NextAttemptAt != nil {
		e.raw(`,"next_attempt_at":`)
		e.time(*f.NextAttemptAt)
	}
	if f.DeliveredAt != nil {
		e.raw(`,"delivered_at":`)
		e.time(*f.DeliveredAt)
	}
	e.raw("}")
}

func (e *encoder) latest(l *versioning.Latest) {
	e.raw(`{"version":`)
	e.string(l.Version)
	e.raw(`,"order":`)
	e.b = strconv.AppendUint(e.b, l.Order, 10)
	e.raw(`,"request_id":`)
	e.string(l.RequestID)
	e.raw(`,"updated_at":`)
	e.time(l.UpdatedAt)
	e.raw("}")
}

func (e *encoder) raw(s string) { e.b = append(e.b, s...) }

func (e *encoder) int(n int) { e.b = strconv.AppendInt(e.b, int64(n), 10) }

// omitEmpty writes a field tagged omitempty: key (with its comma and colon)
// and s, unless s is empty.
func (e *encoder) omitEmpty(key, s string) {
	if s != "" {
		e.raw(key)
		e.string(s)
	}
}

// time writes t as time.Time's MarshalJSON does, and fails where it fails
// (years outside 0–9999).
func (e *encoder) time(t time.Time) {
	e.b = append(e.b, '"')
	var err error
	if e.b, err = t.AppendText(e.b); err != nil && e.err == nil {
		e.err = err
	}
	e.b = append(e.b, '"')
}

// string writes s quoted as encoding/json does by default: <, > and & are
// escaped for HTML, invalid UTF-8 becomes U+FFFD, and U+2028 and U+2029 are
// escaped for JavaScript.
func (e *encoder) string(s string) {
	const hex = "0123456789abcdef"
	b := append(e.b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	e.b = append(append(b, s[start:]...), '"')
}
