package store

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

const (
	prefixReceipt = 'r'
	prefixLatest  = 'v'
	prefixOutbox  = 'o'
	prefixDead    = 'd'
	prefixPayload = 'p'
	prefixForward = 'f'
	prefixByTime  = 't'
	prefixBySrc   = 's'
	prefixControl = 'c'
	prefixDeadAge = 'e'
)

// timeLen is the size of a time in a key: Unix seconds and nanoseconds,
// big-endian, so that keys sort by time.
const timeLen = 12

func appendKeyTime(k []byte, t time.Time) []byte {
	k = binary.BigEndian.AppendUint64(k, uint64(t.Unix()))
	return binary.BigEndian.AppendUint32(k, uint32(t.Nanosecond()))
}

// keyTime reads a time appendKeyTime wrote; ok is false for bytes it
// cannot have written.
func keyTime(b []byte) (t time.Time, ok bool) {
	if len(b) < timeLen {
		return t, false
	}
	nsec := binary.BigEndian.Uint32(b[8:timeLen])
	if nsec >= 1e9 {
		return t, false
	}
	return time.Unix(int64(binary.BigEndian.Uint64(b[:8])), int64(nsec)).UTC(), true
}

func pairKey(prefix byte, a, b string) []byte {
	k := make([]byte, 0, 2+len(a)+len(b))
	k = append(k, prefix)
	k = append(k, a...)
	k = append(k, 0)
	return append(k, b...)
}

func receiptKey(source, requestID string) []byte { return pairKey(prefixReceipt, source, requestID) }
func latestKey(source, resource string) []byte   { return pairKey(prefixLatest, source, resource) }
func payloadKey(source, requestID string) []byte { return pairKey(prefixPayload, source, requestID) }

// deadKey is the key of a dead letter of one route: source, route and
// request ID, so that a source's dead letters, and a route's, are a
// prefix (targetPrefix).
func deadKey(tg forward.Target, requestID string) []byte {
	k := append(pairKey(prefixDead, tg.Source, tg.Route), 0)
	return append(k, requestID...)
}

// deadAgePrefix is the prefix of tg's keys in the index of dead letters
// by target and acceptance (deadAgeKey).
func deadAgePrefix(tg forward.Target) []byte {
	return append(pairKey(prefixDeadAge, tg.Source, tg.Route), 0)
}

// deadAgeKey is a dead letter's key in the index of each target's dead
// letters in the order bulk repair takes them, oldest first:
// e<source>\x00<route>\x00<created_at><request_id>. Its value is when
// the letter died (appendKeyTime), so that a page filtered by death time
// reads no dead letter.
func deadAgeKey(e *forward.Entry) []byte {
	return append(appendKeyTime(deadAgePrefix(e.Target()), e.CreatedAt), e.RequestID...)
}

// deadKeyParts returns the target and request ID named by a dead
// letter's key.
func deadKeyParts(key []byte) (forward.Target, string) {
	source, rest, _ := strings.Cut(string(key[1:]), "\x00")
	route, requestID, _ := strings.Cut(rest, "\x00")
	return forward.Target{Source: source, Route: route}, requestID
}

// routeIs says whether a dead letter's key is of route.
func routeIs(key []byte, route string) bool {
	_, rest, _ := bytes.Cut(key[1:], []byte{0})
	r, _, _ := bytes.Cut(rest, []byte{0})
	return string(r) == route
}

// forwardKey is the key of the forward status, on route, of the receipt
// of requestID first seen at firstSeen. The status can outlive its
// receipt (see setForward), and a later receipt under the same request ID
// has keys of its own, which settling the earlier one's outbox entries
// leaves alone. The route goes last, after the fixed-size time, so that
// no route's key is read as another's.
func forwardKey(source, requestID string, firstSeen time.Time, route string) []byte {
	k := appendKeyTime(append(pairKey(prefixForward, source, requestID), 0), firstSeen)
	return append(k, route...)
}

// receiptPos is a receipt's place in the receipt indexes, which order
// receipts by first seen, source and request ID.
type receiptPos struct {
	firstSeen         time.Time
	source, requestID string
}

// byTimeKey is the key of a receipt in the index of every receipt by
// time: t<first_seen><source>\x00<request_id>.
func byTimeKey(p receiptPos) []byte {
	k := appendKeyTime(append(make([]byte, 0, 2+timeLen+len(p.source)+len(p.requestID)), prefixByTime), p.firstSeen)
	k = append(append(k, p.source...), 0)
	return append(k, p.requestID...)
}

// bySourceKey is the key of a receipt in the index of its source's
// receipts by time: s<source>\x00<first_seen><request_id>.
func bySourceKey(p receiptPos) []byte {
	return append(appendKeyTime(bySourcePrefix(p.source), p.firstSeen), p.requestID...)
}

func bySourcePrefix(source string) []byte { return pairKey(prefixBySrc, source, "") }

// indexPos reads the receipt position an index key names; ok is false
// for a key neither index writes.
func indexPos(key []byte) (p receiptPos, ok bool) {
	switch {
	case len(key) > 0 && key[0] == prefixByTime:
		if p.firstSeen, ok = keyTime(key[1:]); !ok {
			return p, false
		}
		p.source, p.requestID, ok = strings.Cut(string(key[1+timeLen:]), "\x00")
		return p, ok
	case len(key) > 0 && key[0] == prefixBySrc:
		source, rest, found := bytes.Cut(key[1:], []byte{0})
		if p.firstSeen, ok = keyTime(rest); !found || !ok {
			return p, false
		}
		p.source, p.requestID = string(source), string(rest[timeLen:])
		return p, true
	}
	return p, false
}

// controlKey holds a paused route's pause: c<source>\x00<route>.
func controlKey(tg forward.Target) []byte { return pairKey(prefixControl, tg.Source, tg.Route) }

// controlTarget returns the target named by a control key.
func controlTarget(key []byte) forward.Target {
	source, route, _ := strings.Cut(string(key[1:]), "\x00")
	return forward.Target{Source: source, Route: route}
}

// targetPrefix is the key prefix of a target's keys under prefix, keyed
// source, route, then more: an empty Route is every route of the source,
// an empty Source every key.
func targetPrefix(prefix byte, tg forward.Target) []byte {
	switch {
	case tg.Source == "":
		return []byte{prefix}
	case tg.Route == "":
		return pairKey(prefix, tg.Source, "")
	}
	return append(pairKey(prefix, tg.Source, tg.Route), 0)
}

func outboxKey(seq uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixOutbox
	binary.BigEndian.PutUint64(k[1:], seq)
	return k
}

// Cursors are a kind byte followed by a position, in URL-safe base64:
// opaque to callers, and refused by a list of another kind.
const (
	cursorReceipts = 'r' // a receiptPos: byTimeKey's bytes after its prefix
	cursorOutbox   = 'o' // an outbox position
	cursorDead     = 'd' // a dead letter's key
	cursorBulk     = 'b' // a dead letter's created time, then its key
)

func encodeCursor(kind byte, pos []byte) string {
	return base64.RawURLEncoding.EncodeToString(append([]byte{kind}, pos...))
}

// decodeCursor returns the position in cursor, which must be of kind.
func decodeCursor(kind byte, cursor string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(b) < 2 || b[0] != kind {
		return nil, badCursor()
	}
	return b[1:], nil
}

func badCursor() error { return webhookd.FieldErrorf("cursor", "not a cursor of this list") }
