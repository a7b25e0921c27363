package store

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/webhookd/webhookd/forward"
)

// FuzzEntryEncoding checks that every entry reads back as it was written,
// whole, its body alone and its target alone.
func FuzzEntryEncoding(f *testing.F) {
	f.Add("billing", "ledger", "req-1", "sub_1", "10", "application/json", "X-Tenant", "t-1", "busy",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", int64(1796040000), 3, 503, true, []byte(`{"a":1}`))
	f.Add("a<b>&", "\u2029<", "é\u2028\"\\", "", "", "", "", "", "\xff", "", int64(253402300800), 0, -1, false, []byte{})
	f.Fuzz(func(t *testing.T, source, route, requestID, resource, version, contentType, hk, hv, lastError, trace string,
		sec int64, attempts, status int, dead bool, body []byte) {
		at := time.Unix(sec, int64(attempts&0x3fffffff)%1e9).UTC()
		e := &forward.Entry{
			Source: source, Route: route, RequestID: requestID, Resource: resource, Version: version,
			ContentType: contentType, CreatedAt: at, Attempts: attempts, NextAttemptAt: at.Add(time.Second),
			LastStatus: status, LastError: lastError, Trace: trace, Body: body,
		}
		if hk != "" {
			e.Headers = map[string]string{hk: hv, "Z-" + hk: hv + "z", "A" + hk: ""}
		}
		if dead {
			e.DeadAt, e.BodyLost = &at, true
		}
		b := encodeEntry(e)
		var got forward.Entry
		if err := decodeEntryValue(b, true, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&got, e) {
			t.Fatalf("decode(encode(e)) = %+v, want %+v", got, *e)
		}
		gotBody, createdAt, err := decodeBody(b)
		if err != nil || !bytes.Equal(gotBody, body) || !createdAt.Equal(at) {
			t.Fatalf("decodeBody = %q, %v, %v; want %q, %v", gotBody, createdAt, err, body, at)
		}
		if tg, err := entryTarget(b); err != nil || tg != e.Target() {
			t.Fatalf("entryTarget = %v, %v; want %v", tg, err, e.Target())
		}
	})
}

// TestEncodeWritesEveryField guards the encoding against a field added to
// forward.Entry later and not written: every field of a full entry but
// Seq, which is the outbox key's, reads back.
func TestEncodeWritesEveryField(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC)
	e := &forward.Entry{
		Seq: 7, Source: "s", Route: "a", RequestID: "r", Resource: "res", Version: "2", ContentType: "application/json",
		Headers: map[string]string{"X-A": "1"}, Trace: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", CreatedAt: at, Attempts: 2, NextAttemptAt: at,
		LastStatus: 503, LastError: "busy", DeadAt: &at, BodyLost: true, Body: []byte("{}"),
	}
	v := reflect.ValueOf(e).Elem()
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("field %s is zero in the test's entry: give it a value", v.Type().Field(i).Name)
		}
	}
	var back forward.Entry
	if err := decodeEntryValue(encodeEntry(e), true, &back); err != nil {
		t.Fatal(err)
	}
	back.Seq = e.Seq
	if !reflect.DeepEqual(&back, e) {
		t.Errorf("Decode(Encode(e)) = %+v, want %+v", back, *e)
	}
}

func TestEntryEncoding(t *testing.T) {
	body := []byte("{\"a\":1}\x00\xff raw bytes")
	e := forward.Entry{Source: "s", RequestID: "r", Resource: "x", Version: "3", ContentType: "application/json", Headers: map[string]string{"X-Request-Id": "q"}, Attempts: 2, Body: body}
	b := encodeEntry(&e)
	var got forward.Entry
	if err := decodeEntryValue(b, true, &got); err != nil {
		t.Fatal(err)
	}
	if string(got.Body) != string(body) || got.RequestID != "r" || got.Headers["X-Request-Id"] != "q" || got.Attempts != 2 {
		t.Errorf("round trip = %+v", got)
	}
	var meta forward.Entry
	if err := decodeEntryValue(b, false, &meta); err != nil || meta.Body != nil || meta.Version != "3" {
		t.Errorf("metadata only = %+v, %v", meta, err)
	}
	metaLen := len(b) - len(body)
	truncated := append(bytes.Clone(b[:metaLen-1]), body...)
	truncated[0]--
	wrongTag := bytes.Clone(b)
	wrongTag[1] = tagReceipt
	for name, bad := range map[string][]byte{
		"empty": nil, "bad length": {0xff}, "length past the end": {50, tagEntry},
		"no metadata": {0}, "truncated metadata": truncated, "another record's tag": wrongTag,
	} {
		if err := decodeEntryValue(bad, true, new(forward.Entry)); err == nil {
			t.Errorf("%s: decode(%q) succeeded", name, bad)
		}
		if _, _, err := decodeBody(bad); err == nil && name != "truncated metadata" {
			t.Errorf("%s: decodeBody(%q) succeeded", name, bad)
		}
	}
}
