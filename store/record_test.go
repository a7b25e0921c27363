package store

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/versioning"
)

// fullRecords returns a receipt, the forward status of its first route and
// a latest version with every field set, times in UTC and the receipt's reason the one its
// fields give, as decode returns them.
func fullRecords() (*dedupe.Receipt, *webhookd.ForwardStatus, *versioning.Latest) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC)
	later := at.Add(90 * time.Second)
	r := &dedupe.Receipt{
		Source: "billing", RequestID: "req-1", Resource: "sub_1", Version: "2", Decision: webhookd.Accepted,
		DuplicateDecision: dedupe.New, OrderingDecision: string(versioning.Newer), LatestVersionAtDecision: "1",
		PayloadSHA256: strings.Repeat("0f", 32), FirstSeen: at,
		Routes: []webhookd.RouteStatus{
			{Route: "ledger", ForwardStatus: webhookd.ForwardStatus{State: webhookd.ForwardRetrying, Attempts: 2, LastStatus: 503,
				LastError: "busy", NextAttemptAt: &later, DeliveredAt: &at}},
			{Route: "audit", ForwardStatus: webhookd.ForwardStatus{State: webhookd.ForwardDelivered, Attempts: 1, DeliveredAt: &at}},
		},
		// Not with routes in practice; set so that the round trips cover it.
		Unrouted: true,
	}
	r.Reason = dedupe.Reason(versioning.Newer, r.Version, r.LatestVersionAtDecision)
	r.Record(dedupe.Delivery{DeliveryID: "d-1", ReceivedAt: at, Decision: webhookd.Accepted})
	r.Record(dedupe.Delivery{DeliveryID: "d-2", ReceivedAt: later, Decision: webhookd.Duplicate})
	f := r.Routes[0].ForwardStatus
	return r, &f, &versioning.Latest{Version: "2", Order: 2, RequestID: "req-1", UpdatedAt: at}
}

// TestFullRecordsSetEveryField guards the round trips below against a
// field added to a record later and left out of encode: a zero field
// would come back zero and hide it.
func TestFullRecordsSetEveryField(t *testing.T) {
	r, f, l := fullRecords()
	for _, v := range []any{r, &r.Deliveries[0], &r.Routes[0], f, l} {
		rv := reflect.ValueOf(v).Elem()
		for i := range rv.NumField() {
			if rv.Field(i).IsZero() {
				t.Errorf("%T.%s is zero", v, rv.Type().Field(i).Name)
			}
		}
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	r, f, l := fullRecords()
	roundTrip(t, r)
	roundTrip(t, f)
	roundTrip(t, l)
	roundTrip(t, &dedupe.Receipt{Reason: dedupe.Reason("", "", "")})
	roundTrip(t, &webhookd.ForwardStatus{})
	roundTrip(t, &versioning.Latest{})
	r.Deliveries = []dedupe.Delivery{}
	roundTrip(t, r)
	r.Routes, r.Unrouted = nil, false
	roundTrip(t, r)
}

// roundTrip checks that decode reads back what encode wrote.
func roundTrip[T any](t *testing.T, want *T) {
	t.Helper()
	b, err := encode(want)
	if err != nil {
		t.Fatal(err)
	}
	got := new(T)
	if err := decode(b, got); err != nil {
		t.Fatalf("decode %T from %q: %v", want, b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decode %T:\n got %+v\nwant %+v", want, got, want)
	}
}

// TestRecordsAreSmall keeps the point of the binary form: a decision's
// records are what fill Badger's memtables.
func TestRecordsAreSmall(t *testing.T) {
	r, _, l := fullRecords()
	r.Deliveries = r.Deliveries[:1]
	r.Routes = []webhookd.RouteStatus{{Route: "ledger", ForwardStatus: webhookd.ForwardStatus{State: webhookd.ForwardPending}}}
	r.Unrouted = false
	r.Deliveries[0].DeliveryID = "5f0c6e1e-8f4a-4d55-9d1b-2b8c7f3a9e01"
	for _, c := range []struct {
		v   any
		max int
	}{{r, 150}, {l, 30}} {
		b, err := encode(c.v)
		if err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal(c.v)
		t.Logf("%T: %d bytes, %d as JSON", c.v, len(b), len(j))
		if len(b) > c.max {
			t.Errorf("%T: %d bytes (JSON %d), want at most %d", c.v, len(b), len(j), c.max)
		}
	}
}

func TestDecodeRefusesMalformedRecords(t *testing.T) {
	r, _, _ := fullRecords()
	full, _ := encode(r)
	for n := range len(full) {
		if err := decode(full[:n], &dedupe.Receipt{}); err == nil {
			t.Errorf("a receipt cut to %d of %d bytes was read", n, len(full))
		}
	}
	latest, _ := encode(&versioning.Latest{Version: "1"})
	// A receipt up to its attempts: empty strings, three words, a digest
	// written as a string, two zero times.
	forged := []byte{tagReceipt, 0, 0, 0, 0, 1, 5, 8, 0, 0, 0, 0, 0, 0, 0}
	for name, b := range map[string][]byte{
		"trailing bytes":         append(full[:len(full):len(full)], 0),
		"another kind's record":  latest,
		"unknown word":           []byte{tagReceipt, 0, 0, 0, 0, 200},
		"nanoseconds past 1e9":   append([]byte{tagLatest, 0, 0, 0, 0}, 0xff, 0xff, 0xff, 0xff, 0x0f),
		"forged delivery count":  append(forged, 0, 0xff, 0xff, 0xff, 0xff, 0x0f),
		"forged route count":     append(forged, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f),
		"bad unrouted flag":      append(forged, 0, 0, 0, 2),
		"string past the end":    []byte{tagReceipt, 5, 'a'},
		"bad digest flag":        []byte{tagReceipt, 0, 0, 0, 0, 1, 5, 8, 0, 7},
		"attempts past an int64": append(forged, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
	} {
		if err := decode(b, &dedupe.Receipt{}); !errors.Is(err, errMalformed) {
			t.Errorf("%s: %v, want errMalformed", name, err)
		}
	}
}

// FuzzRecords checks the round trip of records with any field values, and
// that decode never panics, whatever the bytes, and reads back what it
// would write from what it read.
func FuzzRecords(f *testing.F) {
	f.Add("req-1", "sub_1", "2", "accepted", int64(1_700_000_000), uint32(123_456_789), 3600, 2, uint64(17), []byte{tagReceipt})
	f.Add("", "", "", "", int64(0), uint32(0), 0, 0, uint64(0), []byte("{}"))
	f.Add("bad utf-8 \xff", "\x00", "1e9", "retrying", int64(-62135596800), uint32(999_999_999), -50400, 40, uint64(1<<64-1), []byte{tagLatest, 1, '1', 0xff, 0x01})
	r, fr, l := fullRecords()
	for _, v := range []any{r, fr, l} {
		b, _ := encode(v)
		f.Add("x", "", "", "", int64(0), uint32(0), 0, 0, uint64(0), b)
	}
	f.Fuzz(func(t *testing.T, id, resource, version, word string, sec int64, nsec uint32, n, deliveries int, order uint64, raw []byte) {
		at := time.Unix(sec, int64(nsec%1e9)).UTC()
		r := &dedupe.Receipt{
			Source: resource + id, RequestID: id, Resource: resource, Version: version,
			Decision: webhookd.Decision(word), DuplicateDecision: dedupe.Outcome(resource), OrderingDecision: word,
			LatestVersionAtDecision: version, PayloadSHA256: id, FirstSeen: at, LastSeen: at.Add(time.Duration(order % 1e12)).UTC(),
			Unrouted: n%2 == 0,
		}
		r.Reason = dedupe.Reason(versioning.Ordering(word), version, version)
		for i := range deliveries % (dedupe.MaxDeliveries + 2) {
			r.Record(dedupe.Delivery{DeliveryID: id[:min(i, len(id))], ReceivedAt: at, Decision: webhookd.Decision(word)})
		}
		r.Attempts = n
		fr := webhookd.ForwardStatus{State: webhookd.ForwardState(word), Attempts: n, LastStatus: -n, LastError: version}
		if deliveries%2 == 1 {
			fr.NextAttemptAt, fr.DeliveredAt = &at, &r.LastSeen
		}
		for i := range deliveries % 4 {
			r.Routes = append(r.Routes, webhookd.RouteStatus{Route: id[:min(i, len(id))] + resource, ForwardStatus: fr})
		}
		roundTrip(t, r)
		roundTrip(t, &fr)
		roundTrip(t, &versioning.Latest{Version: version, Order: order, RequestID: id, UpdatedAt: at})

		rereads[dedupe.Receipt](t, raw)
		rereads[webhookd.ForwardStatus](t, raw)
		rereads[versioning.Latest](t, raw)
	})
}

// rereads decodes b and, when that succeeds, checks that what it read
// comes back from its own encoding.
func rereads[T any](t *testing.T, b []byte) {
	t.Helper()
	v := new(T)
	if decode(b, v) == nil {
		roundTrip(t, v)
	}
}
