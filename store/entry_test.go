package store

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/webhookd/webhookd/forward"
)

// FuzzEncode checks the hand-written metadata against encoding/json, byte
// for byte and error for error: Decode reads it with encoding/json, and
// entries written by either must read back the same.
func FuzzEncode(f *testing.F) {
	f.Add("billing", "ledger", "req-1", "sub_1", "10", "application/json", "X-Tenant", "t-1", "busy",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", int64(1796040000), 3, 503, true, []byte(`{"a":1}`))
	f.Add("a<b>&", "\u2029<", "é\u2028\"\\", "", "", "", "", "", "\xff", "", int64(253402300800), 0, 0, false, []byte{})
	f.Fuzz(func(t *testing.T, source, route, requestID, resource, version, contentType, hk, hv, lastError, trace string,
		sec int64, attempts, status int, dead bool, body []byte) {
		at := time.Unix(sec, 0).UTC()
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
		want, wantErr := json.Marshal(e)
		got, err := encodeEntry(e)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("Encode: error %v, encoding/json's %v", err, wantErr)
		}
		if err != nil {
			return
		}
		meta, rest, err := splitEntry(got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(meta, want) || !bytes.Equal(rest, body) {
			t.Fatalf("Encode:\n got %s + %q\nwant %s + %q", meta, rest, want, body)
		}
	})
}

// TestEncodeWritesEveryField guards FuzzEncode against a field added later
// and left at its zero value there, which omitempty would hide: every field
// of a full entry but Seq and Body (not JSON) appears in its encoding.
func TestEncodeWritesEveryField(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC)
	e := &forward.Entry{
		Seq: 7, Source: "s", Route: "a", RequestID: "r", Resource: "res", Version: "2", ContentType: "application/json",
		Headers: map[string]string{"X-A": "1"}, Trace: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", CreatedAt: at, Attempts: 2, NextAttemptAt: at,
		LastStatus: 503, LastError: "busy", DeadAt: &at, BodyLost: true, Body: []byte("{}"),
	}
	b, err := encodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	meta, _, err := splitEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(meta, &fields); err != nil {
		t.Fatal(err)
	}
	if n := reflect.TypeFor[forward.Entry]().NumField() - 2; len(fields) != n {
		t.Errorf("%d fields encoded, want %d: %s", len(fields), n, meta)
	}
	var back forward.Entry
	if err := decodeEntryValue(b, true, &back); err != nil {
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
	b, err := encodeEntry(&e)
	if err != nil {
		t.Fatal(err)
	}
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
	for _, bad := range [][]byte{nil, {0xff}, {50, '{'}} {
		if err := decodeEntryValue(bad, true, new(forward.Entry)); err == nil {
			t.Errorf("decode(%q) succeeded", bad)
		}
	}
}
