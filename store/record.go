package store

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/versioning"
)

// Receipts, latest versions, forward statuses and the metadata of entries
// are stored in a compact binary form: a decision's records are what fills
// Badger's memtables, and the fewer bytes they take, the less often Badger
// builds a table on the cores the handlers run on. A record starts with
// its kind's tag. It leaves out the receipt's reason, which is a function
// of the fields it keeps (dedupe.Reason), and holds times as UTC.
const (
	tagReceipt = 1
	tagLatest  = 2
	tagForward = 3
	tagEntry   = 4 // an outbox entry's, payload's or dead letter's metadata (entry.go)
)

// words are the decisions, outcomes, orderings and forward states, each
// stored as one byte (its position + 1); 0 is followed by any other string.
// Stored records refer to words by position: append only.
var words = [...]string{
	string(webhookd.Accepted), string(webhookd.Duplicate), string(webhookd.Stale), string(webhookd.Conflict),
	string(dedupe.New),
	string(versioning.First), string(versioning.Newer), string(versioning.Unordered), string(versioning.Tie),
	string(webhookd.ForwardPending), string(webhookd.ForwardRetrying), string(webhookd.ForwardDelivered),
	string(webhookd.ForwardDead), string(webhookd.ForwardDiscarded), string(webhookd.ForwardSuperseded),
}

var errMalformed = errors.New("malformed record")

// encode returns the stored form of a receipt, latest version or forward
// record.
func encode(v any) ([]byte, error) {
	switch v := v.(type) {
	case *dedupe.Receipt:
		return appendReceipt(make([]byte, 0, 160+64*len(v.Deliveries)+32*len(v.Routes)), v), nil
	case *versioning.Latest:
		return appendLatest(make([]byte, 0, 64), v), nil
	case *webhookd.ForwardStatus:
		return appendForward(append(make([]byte, 0, 64), tagForward), v), nil
	}
	return nil, fmt.Errorf("no stored form for %T", v)
}

// decode reads b, as encode writes it, into v, a zero value of one of the
// types encode takes.
func decode(b []byte, v any) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty", errMalformed)
	}
	r := reader{b: b[1:]}
	switch v := v.(type) {
	case *dedupe.Receipt:
		r.expect(b[0], tagReceipt)
		r.receipt(v)
	case *versioning.Latest:
		r.expect(b[0], tagLatest)
		r.latest(v)
	case *webhookd.ForwardStatus:
		r.expect(b[0], tagForward)
		r.forward(v)
	default:
		return fmt.Errorf("no stored form for %T", v)
	}
	return r.end()
}

func appendReceipt(b []byte, r *dedupe.Receipt) []byte {
	b = append(b, tagReceipt)
	b = appendString(b, r.Source)
	b = appendString(b, r.RequestID)
	b = appendString(b, r.Resource)
	b = appendString(b, r.Version)
	b = appendWord(b, string(r.Decision))
	b = appendWord(b, string(r.DuplicateDecision))
	b = appendWord(b, r.OrderingDecision)
	b = appendString(b, r.LatestVersionAtDecision)
	b = appendDigest(b, r.PayloadSHA256)
	b = appendTime(b, r.FirstSeen)
	b = appendTime(b, r.LastSeen)
	b = binary.AppendVarint(b, int64(r.Attempts))
	if r.Deliveries == nil {
		b = append(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(r.Deliveries))+1)
	}
	for _, d := range r.Deliveries {
		b = appendString(b, d.DeliveryID)
		b = appendTime(b, d.ReceivedAt)
		b = appendWord(b, string(d.Decision))
	}
	b = binary.AppendUvarint(b, uint64(len(r.Routes)))
	for i := range r.Routes {
		b = appendString(b, r.Routes[i].Route)
		b = appendForward(b, &r.Routes[i].ForwardStatus)
	}
	if r.Unrouted {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendLatest(b []byte, l *versioning.Latest) []byte {
	b = append(b, tagLatest)
	b = appendString(b, l.Version)
	b = binary.AppendUvarint(b, l.Order)
	b = appendString(b, l.RequestID)
	return appendTime(b, l.UpdatedAt)
}

func appendForward(b []byte, f *webhookd.ForwardStatus) []byte {
	b = appendWord(b, string(f.State))
	b = binary.AppendVarint(b, int64(f.Attempts))
	b = binary.AppendVarint(b, int64(f.LastStatus))
	b = appendString(b, f.LastError)
	b = appendTimePtr(b, f.NextAttemptAt)
	return appendTimePtr(b, f.DeliveredAt)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendWord(b []byte, s string) []byte {
	for i, w := range words {
		if w == s {
			return append(b, byte(i+1))
		}
	}
	return appendString(append(b, 0), s)
}

// appendDigest writes a SHA-256 in lower-case hex, as fingerprints are, in
// its 32 bytes, and anything else as a string.
func appendDigest(b []byte, s string) []byte {
	if raw, err := hex.DecodeString(s); err == nil && len(raw) == 32 && hex.EncodeToString(raw) == s {
		return append(append(b, 1), raw...)
	}
	return appendString(append(b, 0), s)
}

func appendTime(b []byte, t time.Time) []byte {
	b = binary.AppendVarint(b, t.Unix())
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}

func appendTimePtr(b []byte, t *time.Time) []byte {
	if t == nil {
		return append(b, 0)
	}
	return appendTime(append(b, 1), *t)
}

// reader reads a record field by field. The first error stops it: every
// later read returns a zero value.
type reader struct {
	b   []byte
	err error
}

// end returns the first error, or an error for bytes left after the
// record's last field.
func (r *reader) end() error {
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%w: %d bytes after the end", errMalformed, len(r.b))
	}
	return r.err
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: bad %s", errMalformed, what)
	}
	r.b = nil
}

func (r *reader) expect(tag, want byte) {
	if tag != want {
		r.err = fmt.Errorf("%w: tag %d, want %d", errMalformed, tag, want)
		r.b = nil
	}
}

func (r *reader) byte(what string) byte {
	if len(r.b) == 0 {
		r.fail(what)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint(what string) uint64 { return readVarint(r, binary.Uvarint, what) }
func (r *reader) varint(what string) int64   { return readVarint(r, binary.Varint, what) }

// readVarint reads one varint with decode, binary.Uvarint or binary.Varint.
func readVarint[T int64 | uint64](r *reader, decode func([]byte) (T, int), what string) T {
	n, size := decode(r.b)
	if size <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[size:]
	return n
}

func (r *reader) int(what string) int {
	n := r.varint(what)
	if int64(int(n)) != n {
		r.fail(what)
		return 0
	}
	return int(n)
}

// bytes returns the next n bytes, which alias the record.
func (r *reader) bytes(n uint64, what string) []byte {
	if n > uint64(len(r.b)) {
		r.fail(what)
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

// string copies: Badger's bytes are valid only inside the transaction.
func (r *reader) string(what string) string {
	return string(r.bytes(r.uvarint(what), what))
}

func (r *reader) word(what string) string {
	i := r.byte(what)
	switch {
	case i == 0:
		return r.string(what)
	case int(i) <= len(words):
		return words[i-1]
	}
	r.fail(what)
	return ""
}

func (r *reader) digest(what string) string {
	switch r.byte(what) {
	case 0:
		return r.string(what)
	case 1:
		return hex.EncodeToString(r.bytes(32, what))
	}
	r.fail(what)
	return ""
}

func (r *reader) time(what string) time.Time {
	sec := r.varint(what)
	nsec := r.uvarint(what)
	if r.err != nil || nsec >= 1e9 {
		r.fail(what)
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

func (r *reader) timePtr(what string) *time.Time {
	switch r.byte(what) {
	case 0:
		return nil
	case 1:
		t := r.time(what)
		return &t
	}
	r.fail(what)
	return nil
}

func (r *reader) receipt(rc *dedupe.Receipt) {
	rc.Source = r.string("source")
	rc.RequestID = r.string("request_id")
	rc.Resource = r.string("resource")
	rc.Version = r.string("version")
	rc.Decision = webhookd.Decision(r.word("decision"))
	rc.DuplicateDecision = dedupe.Outcome(r.word("duplicate_decision"))
	rc.OrderingDecision = r.word("ordering_decision")
	rc.LatestVersionAtDecision = r.string("latest_version_at_decision")
	rc.Reason = dedupe.Reason(versioning.Ordering(rc.OrderingDecision), rc.Version, rc.LatestVersionAtDecision)
	rc.PayloadSHA256 = r.digest("payload_sha256")
	rc.FirstSeen = r.time("first_seen")
	rc.LastSeen = r.time("last_seen")
	rc.Attempts = r.int("attempts")
	if n := r.uvarint("deliveries"); n > 0 {
		// Each delivery takes three bytes at least: a forged count must
		// not allocate more than the record could hold.
		if n-1 > uint64(len(r.b))/3 {
			r.fail("deliveries")
			return
		}
		rc.Deliveries = make([]dedupe.Delivery, n-1)
		for i := range rc.Deliveries {
			d := &rc.Deliveries[i]
			d.DeliveryID = r.string("delivery_id")
			d.ReceivedAt = r.time("received_at")
			d.Decision = webhookd.Decision(r.word("decision"))
		}
	}
	if n := r.uvarint("routes"); n > 0 {
		// Each route takes seven bytes at least.
		if n > uint64(len(r.b))/7 {
			r.fail("routes")
			return
		}
		rc.Routes = make([]webhookd.RouteStatus, n)
		for i := range rc.Routes {
			rc.Routes[i].Route = r.string("route")
			r.forward(&rc.Routes[i].ForwardStatus)
		}
	}
	switch r.byte("unrouted") {
	case 0:
	case 1:
		rc.Unrouted = true
	default:
		r.fail("unrouted")
	}
}

func (r *reader) latest(l *versioning.Latest) {
	l.Version = r.string("version")
	l.Order = r.uvarint("order")
	l.RequestID = r.string("request_id")
	l.UpdatedAt = r.time("updated_at")
}

func (r *reader) forward(f *webhookd.ForwardStatus) {
	f.State = webhookd.ForwardState(r.word("state"))
	f.Attempts = r.int("attempts")
	f.LastStatus = r.int("last_status")
	f.LastError = r.string("last_error")
	f.NextAttemptAt = r.timePtr("next_attempt_at")
	f.DeliveredAt = r.timePtr("delivered_at")
}
