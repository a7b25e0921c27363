package store

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/versioning"
)

// FuzzEncode checks that the hand-written encoders write what encoding/json
// writes, byte for byte, and fail where it fails.
func FuzzEncode(f *testing.F) {
	f.Add("req-1", "", "", int64(1_700_000_000), uint32(123_456_789), 0, 0, uint64(0))
	f.Add("inv_42", "cus/7", "17", int64(0), uint32(0), 3600, 2, uint64(17))
	f.Add(`quote " backslash \ <script>&amp;`, "tab\tnl\nbs\bff\fcr\r", "\x00\x1f\x7f", int64(-1), uint32(1), -19800, 33, uint64(1<<63))
	f.Add("bad utf-8 \xff\xfe \xe2\x80", "line\u2028para\u2029", "é€😀", int64(253402300799), uint32(999_999_999), -50400, 1, uint64(1<<64-1))
	f.Add("year 10000", "", "", int64(253402300800), uint32(0), 0, 1, uint64(0)) // refused by both
	f.Add("offset seconds", "", "", int64(0), uint32(0), 3601, 1, uint64(0))     // refused by both
	f.Add("year -1", "", "", int64(-62167219201), uint32(0), 0, 1, uint64(0))    // refused by both
	f.Fuzz(func(t *testing.T, id, resource, version string, sec int64, nsec uint32, offset, deliveries int, order uint64) {
		at := time.Unix(sec, int64(nsec%1e9)).In(time.FixedZone("", offset))
		r := &dedupe.Receipt{
			Source:                  resource + id,
			RequestID:               id,
			Resource:                resource,
			Version:                 version,
			Decision:                webhookd.Decision(version),
			Reason:                  id + version,
			DuplicateDecision:       dedupe.Outcome(resource),
			OrderingDecision:        version,
			LatestVersionAtDecision: resource,
			PayloadSHA256:           id,
			FirstSeen:               at,
			LastSeen:                at.Add(time.Duration(order % 1e12)),
			Forward: webhookd.ForwardStatus{
				State:      webhookd.ForwardState(id),
				Attempts:   offset,
				LastStatus: deliveries,
				LastError:  version,
			},
		}
		for i := range deliveries % (dedupe.MaxDeliveries + 2) {
			r.Record(dedupe.Delivery{DeliveryID: id[:min(i, len(id))], ReceivedAt: at, Decision: webhookd.Decision(resource)})
		}
		f := &forwardRecord{ForwardStatus: r.Forward}
		if deliveries%2 == 1 {
			r.Forward.NextAttemptAt, r.Forward.DeliveredAt = &at, &r.LastSeen
			f.ForwardStatus, f.ReceiptFirstSeen = r.Forward, at
		}
		sameAsEncodingJSON(t, r)
		sameAsEncodingJSON(t, f)
		sameAsEncodingJSON(t, &versioning.Latest{Version: version, Order: order, RequestID: id, UpdatedAt: at})
	})
}

func sameAsEncodingJSON(t *testing.T, v any) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	got, err := encode(v)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("encode %T: error %v, encoding/json's %v", v, err, wantErr)
	}
	if err == nil && !bytes.Equal(got, want) {
		t.Fatalf("encode %T:\n got %s\nwant %s", v, got, want)
	}
}

// TestEncodeWritesEveryField guards FuzzEncode against a field added
// later and left at its zero value there, which an omitempty tag would
// hide: every field of a full record appears in its encoding.
func TestEncodeWritesEveryField(t *testing.T) {
	r, l := fullRecords()
	receipt := fieldsOf(t, r)
	forward, _ := receipt["forward"].(map[string]any)
	statusFields := reflect.TypeFor[webhookd.ForwardStatus]().NumField()
	for _, c := range []struct {
		name   string
		fields map[string]any
		want   int
	}{
		{"receipt", receipt, reflect.TypeFor[dedupe.Receipt]().NumField()},
		{"forward status", forward, statusFields},
		{"forward record", fieldsOf(t, fullForwardRecord(r)), statusFields + reflect.TypeFor[forwardRecord]().NumField() - 1},
		{"latest", fieldsOf(t, l), reflect.TypeFor[versioning.Latest]().NumField()},
	} {
		if len(c.fields) != c.want {
			t.Errorf("%s: %d fields encoded, the type has %d", c.name, len(c.fields), c.want)
		}
	}
	sameAsEncodingJSON(t, r)
	sameAsEncodingJSON(t, fullForwardRecord(r))
	sameAsEncodingJSON(t, l)
}

// fullRecords returns a receipt, with its forward status, and a latest
// version that have every field set.
func fullRecords() (*dedupe.Receipt, *versioning.Latest) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC)
	r := &dedupe.Receipt{
		Source: "s", RequestID: "r", Resource: "res", Version: "2", Decision: webhookd.Accepted,
		Reason: "why", DuplicateDecision: dedupe.New, OrderingDecision: "newer",
		LatestVersionAtDecision: "1", PayloadSHA256: "abc", FirstSeen: at, LastSeen: at,
		Forward: webhookd.ForwardStatus{State: webhookd.ForwardRetrying, Attempts: 2, LastStatus: 503,
			LastError: "busy", NextAttemptAt: &at, DeliveredAt: &at},
	}
	r.Record(dedupe.Delivery{DeliveryID: "d", ReceivedAt: at, Decision: webhookd.Accepted})
	return r, &versioning.Latest{Version: "2", Order: 2, RequestID: "r", UpdatedAt: at}
}

// fullForwardRecord returns the forward key's record of r, every field set.
func fullForwardRecord(r *dedupe.Receipt) *forwardRecord {
	return &forwardRecord{ForwardStatus: r.Forward, ReceiptFirstSeen: r.FirstSeen}
}

func fieldsOf(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := encode(v)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	return fields
}
