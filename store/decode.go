package store

import (
	"encoding/json"
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
	case *webhookd.ForwardStatus:
		if readForward(root, v) {
			return true
		}
		*v = webhookd.ForwardStatus{}
	case *versioning.Latest:
		if readLatest(root, v) {
			return true
		}
		*v = versioning.Latest{}
	}
	return false
}

// readObject calls field for each key of the object o, and reports false
// when o is not an object (or null), a key comes twice, or field does.
// keys lists the keys field knows, for the duplicate check.
func readObject(o gjson.Result, keys []string, field func(key int, v gjson.Result) bool) bool {
	if o.Type == gjson.Null {
		return true
	}
	if !o.IsObject() {
		return false
	}
	ok := true
	var seen uint32
	o.ForEach(func(k, v gjson.Result) bool {
		i := indexOf(keys, k)
		if ok = i >= 0 && seen&(1<<i) == 0; ok {
			seen |= 1 << i
			ok = field(i, v)
		}
		return ok
	})
	return ok
}

func indexOf(keys []string, k gjson.Result) int {
	if k.Type != gjson.String || strings.IndexByte(k.Raw, '\\') >= 0 {
		return -1 // an escaped key is left to encoding/json
	}
	for i, key := range keys {
		if k.Str == key {
			return i
		}
	}
	return -1
}

var receiptKeys = []string{"source", "request_id", "resource", "version", "decision", "reason",
	"duplicate_decision", "ordering_decision", "latest_version_at_decision", "payload_sha256",
	"first_seen", "last_seen", "attempts", "deliveries", "forward"}

func readReceipt(o gjson.Result, r *dedupe.Receipt) bool {
	return readObject(o, receiptKeys, func(key int, v gjson.Result) bool {
		switch key {
		case 0:
			return readString(v, &r.Source)
		case 1:
			return readString(v, &r.RequestID)
		case 2:
			return readString(v, &r.Resource)
		case 3:
			return readString(v, &r.Version)
		case 4:
			return readString(v, (*string)(&r.Decision))
		case 5:
			return readString(v, &r.Reason)
		case 6:
			return readString(v, (*string)(&r.DuplicateDecision))
		case 7:
			return readString(v, &r.OrderingDecision)
		case 8:
			return readString(v, &r.LatestVersionAtDecision)
		case 9:
			return readString(v, &r.PayloadSHA256)
		case 10:
			return readTime(v, &r.FirstSeen)
		case 11:
			return readTime(v, &r.LastSeen)
		case 12:
			return readInt(v, &r.Attempts)
		case 13:
			return readDeliveries(v, &r.Deliveries)
		default:
			return readForward(v, &r.Forward)
		}
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

var deliveryKeys = []string{"delivery_id", "received_at", "decision"}

func readDelivery(o gjson.Result, d *dedupe.Delivery) bool {
	return readObject(o, deliveryKeys, func(key int, v gjson.Result) bool {
		switch key {
		case 0:
			return readString(v, &d.DeliveryID)
		case 1:
			return readTime(v, &d.ReceivedAt)
		default:
			return readString(v, (*string)(&d.Decision))
		}
	})
}

var forwardKeys = []string{"state", "attempts", "last_status", "last_error", "next_attempt_at", "delivered_at"}

func readForward(o gjson.Result, f *webhookd.ForwardStatus) bool {
	return readObject(o, forwardKeys, func(key int, v gjson.Result) bool {
		switch key {
		case 0:
			return readString(v, (*string)(&f.State))
		case 1:
			return readInt(v, &f.Attempts)
		case 2:
			return readInt(v, &f.LastStatus)
		case 3:
			return readString(v, &f.LastError)
		case 4:
			return readTimePtr(v, &f.NextAttemptAt)
		default:
			return readTimePtr(v, &f.DeliveredAt)
		}
	})
}

var latestKeys = []string{"version", "order", "request_id", "updated_at"}

func readLatest(o gjson.Result, l *versioning.Latest) bool {
	return readObject(o, latestKeys, func(key int, v gjson.Result) bool {
		switch key {
		case 0:
			return readString(v, &l.Version)
		case 1:
			return readUint(v, &l.Order)
		case 2:
			return readString(v, &l.RequestID)
		default:
			return readTime(v, &l.UpdatedAt)
		}
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
