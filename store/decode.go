package store

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/versioning"
)

// decode reads the JSON b into v, a zero value. Receipts, read back and
// rewritten at every redelivery by the one writer goroutine, latest
// versions and forward statuses are read without reflection:
// encoding/json took about 8 µs a redelivery, 14 % of the CPU of a run of
// redeliveries. The fast path reads what encode writes: known keys, once
// each, with the types encode gives them. Anything else (a key it does not
// know, a duplicate, a string that is not valid UTF-8) goes to
// encoding/json, so the result is always what encoding/json would decode
// (FuzzDecode compares them).
func decode(b []byte, v any) error {
	if readFast(b, v) {
		return nil
	}
	return json.Unmarshal(b, v)
}

// readFast reads b into v and reports true, or leaves v zero and reports
// false for what it leaves to encoding/json.
func readFast(b []byte, v any) bool {
	if !gjson.ValidBytes(b) {
		return false
	}
	root := gjson.ParseBytes(b) // one copy of b, which the strings share
	switch v := v.(type) {
	case *dedupe.Receipt:
		if readReceipt(root, v) {
			return true
		}
		*v = dedupe.Receipt{}
	case *forwardRecord:
		if readForwardRecord(root, v) {
			return true
		}
		*v = forwardRecord{}
	case *versioning.Latest:
		if readLatest(root, v) {
			return true
		}
		*v = versioning.Latest{}
	}
	return false
}

// readObject calls field for each key of the object o, and reports false
// when o is not an object (or null), a key is escaped or comes twice, or
// field returns false: for a key it does not know, or a value it cannot
// read.
func readObject(o gjson.Result, field func(key string, v gjson.Result) bool) bool {
	if o.Type == gjson.Null {
		return true
	}
	if !o.IsObject() {
		return false
	}
	ok := true
	var keys [16]string // a record has at most 15 known keys: a list beats a map
	seen := keys[:0]
	o.ForEach(func(k, v gjson.Result) bool {
		ok = k.Type == gjson.String && strings.IndexByte(k.Raw, '\\') < 0 && !slices.Contains(seen, k.Str) && field(k.Str, v)
		seen = append(seen, k.Str)
		return ok
	})
	return ok
}

func readReceipt(o gjson.Result, r *dedupe.Receipt) bool {
	return readObject(o, func(key string, v gjson.Result) bool {
		switch key {
		case "source":
			return readString(v, &r.Source)
		case "request_id":
			return readString(v, &r.RequestID)
		case "resource":
			return readString(v, &r.Resource)
		case "version":
			return readString(v, &r.Version)
		case "decision":
			return readString(v, (*string)(&r.Decision))
		case "reason":
			return readString(v, &r.Reason)
		case "duplicate_decision":
			return readString(v, (*string)(&r.DuplicateDecision))
		case "ordering_decision":
			return readString(v, &r.OrderingDecision)
		case "latest_version_at_decision":
			return readString(v, &r.LatestVersionAtDecision)
		case "payload_sha256":
			return readString(v, &r.PayloadSHA256)
		case "first_seen":
			return readTime(v, &r.FirstSeen)
		case "last_seen":
			return readTime(v, &r.LastSeen)
		case "attempts":
			return readInt(v, &r.Attempts)
		case "deliveries":
			return readDeliveries(v, &r.Deliveries)
		case "forward":
			return readForward(v, &r.Forward)
		}
		return false
	})
}

func readDeliveries(v gjson.Result, ds *[]dedupe.Delivery) bool {
	if v.Type == gjson.Null {
		*ds = nil
		return true
	}
	if !v.IsArray() {
		return false
	}
	out := []dedupe.Delivery{} // an empty array is an empty slice, not nil
	ok := true
	v.ForEach(func(_, e gjson.Result) bool {
		var d dedupe.Delivery
		ok = readDelivery(e, &d)
		out = append(out, d)
		return ok
	})
	*ds = out
	return ok
}

func readDelivery(o gjson.Result, d *dedupe.Delivery) bool {
	return readObject(o, func(key string, v gjson.Result) bool {
		switch key {
		case "delivery_id":
			return readString(v, &d.DeliveryID)
		case "received_at":
			return readTime(v, &d.ReceivedAt)
		case "decision":
			return readString(v, (*string)(&d.Decision))
		}
		return false
	})
}

func readForward(o gjson.Result, f *webhookd.ForwardStatus) bool {
	return readObject(o, func(key string, v gjson.Result) bool { return readForwardField(key, v, f) })
}

func readForwardRecord(o gjson.Result, r *forwardRecord) bool {
	return readObject(o, func(key string, v gjson.Result) bool {
		if key == "receipt_first_seen" {
			return readTime(v, &r.ReceiptFirstSeen)
		}
		return readForwardField(key, v, &r.ForwardStatus)
	})
}

func readForwardField(key string, v gjson.Result, f *webhookd.ForwardStatus) bool {
	switch key {
	case "state":
		return readString(v, (*string)(&f.State))
	case "attempts":
		return readInt(v, &f.Attempts)
	case "last_status":
		return readInt(v, &f.LastStatus)
	case "last_error":
		return readString(v, &f.LastError)
	case "next_attempt_at":
		return readTimePtr(v, &f.NextAttemptAt)
	case "delivered_at":
		return readTimePtr(v, &f.DeliveredAt)
	}
	return false
}

func readLatest(o gjson.Result, l *versioning.Latest) bool {
	return readObject(o, func(key string, v gjson.Result) bool {
		switch key {
		case "version":
			return readString(v, &l.Version)
		case "order":
			return readUint(v, &l.Order)
		case "request_id":
			return readString(v, &l.RequestID)
		case "updated_at":
			return readTime(v, &l.UpdatedAt)
		}
		return false
	})
}

// readString takes a string without escapes as it is; one with escapes is
// unescaped by encoding/json, whose handling of broken ones is the rule.
func readString(v gjson.Result, s *string) bool {
	switch {
	case v.Type == gjson.Null:
		return true
	case v.Type != gjson.String:
		return false
	case strings.IndexByte(v.Raw, '\\') >= 0:
		return json.Unmarshal([]byte(v.Raw), s) == nil
	case !utf8.ValidString(v.Str):
		return false
	}
	*s = v.Str
	return true
}

// readTime parses as encoding/json does: time.Time's UnmarshalJSON, on
// the raw value.
func readTime(v gjson.Result, t *time.Time) bool {
	switch v.Type {
	case gjson.Null:
		return true
	case gjson.String:
		return t.UnmarshalJSON([]byte(v.Raw)) == nil
	}
	return false
}

func readTimePtr(v gjson.Result, p **time.Time) bool {
	if v.Type == gjson.Null {
		*p = nil
		return true
	}
	t := new(time.Time)
	if !readTime(v, t) {
		return false
	}
	*p = t
	return true
}

func readInt(v gjson.Result, n *int) bool {
	if v.Type == gjson.Null {
		return true
	}
	i, err := strconv.ParseInt(v.Raw, 10, strconv.IntSize)
	if v.Type != gjson.Number || err != nil {
		return false
	}
	*n = int(i)
	return true
}

func readUint(v gjson.Result, n *uint64) bool {
	if v.Type == gjson.Null {
		return true
	}
	u, err := strconv.ParseUint(v.Raw, 10, 64)
	if v.Type != gjson.Number || err != nil {
		return false
	}
	*n = u
	return true
}
