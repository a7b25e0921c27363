package store

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/versioning"
)

// FuzzDecode checks that decode reads, from any bytes, what encoding/json
// reads, and fails where it fails. The seeds are records as encode writes
// them, and the shapes the fast path leaves to encoding/json.
func FuzzDecode(f *testing.F) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 5, time.FixedZone("", 3600))
	r := &dedupe.Receipt{
		Source: "billing", RequestID: "req-1", Resource: "sub_1", Version: "2", Decision: webhookd.Accepted,
		Reason: "why", DuplicateDecision: dedupe.New, OrderingDecision: "newer",
		LatestVersionAtDecision: "1", PayloadSHA256: "abc", FirstSeen: at, LastSeen: at.UTC(),
		Forward: webhookd.ForwardStatus{State: webhookd.ForwardRetrying, Attempts: 2, LastStatus: 503,
			LastError: `quote " <tag>`, NextAttemptAt: &at, DeliveredAt: &at},
	}
	r.Record(dedupe.Delivery{DeliveryID: "d-1", ReceivedAt: at, Decision: webhookd.Accepted})
	r.Record(dedupe.Delivery{DeliveryID: "d-2\u2028", ReceivedAt: at.UTC(), Decision: webhookd.Duplicate})
	for _, v := range []any{r, fullForwardRecord(r), &forwardRecord{}, &versioning.Latest{Version: "7", Order: 1<<64 - 1, RequestID: "req-7", UpdatedAt: at}, &dedupe.Receipt{}} {
		b, err := encode(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		`null`, `[]`, `{}`, ` {"source" : "a" } `, `{"source":"a","source":"b"}`, `{"Source":"x"}`, `{"sour\u0063e":"x"}`,
		`{"attempts":1.0}`, `{"attempts":-0}`, `{"attempts":"1"}`, `{"order":-1}`, `{"order":18446744073709551616}`,
		`{"deliveries":[]}`, `{"deliveries":null}`, `{"deliveries":[null,{"decision":"a\u00e9"}]}`, `{"deliveries":{}}`,
		`{"source":"\ud800"}`, `{"source":"\ud800\u0041"}`, "{\"source\":\"\xff\"}", "{\"source\":\"a\tb\"}",
		`{"first_seen":"2026-13-01T00:00:00Z"}`, `{"first_seen":null}`, `{"first_seen":1}`,
		`{"next_attempt_at":null}`, `{"receipt_first_seen":null}`, `{"state":"delivered","receipt_first_seen":"x"}`, `{"delivered_at":"2026-11-30T12:00:00+01:00"}`, `{"forward":{"state":1}}`,
		`{"source":"a"} x`, `{"source":"a",}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sameAsDecodingJSON[dedupe.Receipt](t, b)
		sameAsDecodingJSON[forwardRecord](t, b)
		sameAsDecodingJSON[versioning.Latest](t, b)
	})
}

func sameAsDecodingJSON[T any](t *testing.T, b []byte) {
	t.Helper()
	var got, want T
	err := decode(b, &got)
	wantErr := json.Unmarshal(b, &want)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decode %T from %q: error %v, encoding/json's %v", got, b, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("decode %T from %q:\n got %+v\nwant %+v", got, b, got, want)
	}
}

// TestDecodeReadsWhatEncodeWrites checks the round trip of full records,
// so that a field added to a record and to encode is read back by decode
// too: a key the fast path does not know would make FuzzDecode pass
// through encoding/json, and show nothing.
func TestDecodeReadsWhatEncodeWrites(t *testing.T) {
	r, l := fullRecords()
	for _, c := range []struct{ in, out any }{
		{r, &dedupe.Receipt{}},
		{fullForwardRecord(r), &forwardRecord{}},
		{l, &versioning.Latest{}},
	} {
		b, err := encode(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if !readFast(b, c.out) {
			t.Errorf("%T: the fast path left %s to encoding/json", c.in, b)
		}
		if !reflect.DeepEqual(c.out, c.in) {
			t.Errorf("%T: read back %+v, want %+v", c.in, c.out, c.in)
		}
	}
}
