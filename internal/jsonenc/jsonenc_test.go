package jsonenc_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/webhookd/webhookd/internal/jsonenc"
)

// FuzzAppendString checks AppendString against encoding/json, which is
// what the records it writes are read back with.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{
		"", "req-4401", `quote " backslash \ slash /`, "<script>&amp;</script>",
		"\x00\x01\b\f\n\r\t\x1f\x7f", "é ü 日本", "\u2028\u2029", "bad \xff\xfe utf-8 \xc3",
		"\xe2\x80", "emoji 🙂", "\U0010ffff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte("x")
		got := jsonenc.AppendString(prefix, s)
		if !bytes.Equal(got[1:], want) || got[0] != 'x' {
			t.Fatalf("AppendString(%q) = %s, encoding/json writes %s", s, got[1:], want)
		}
	})
}

// FuzzAppendTime checks AppendTime against time.Time's MarshalJSON, errors
// included.
func FuzzAppendTime(f *testing.F) {
	f.Add(int64(1796040000), int64(5), int64(0))
	f.Add(int64(1796040000), int64(999999999), int64(-5*3600-30*60))
	f.Add(int64(-62135596801), int64(0), int64(0)) // year 0 minus a second: out of range
	f.Add(int64(253402300800), int64(0), int64(0)) // year 10000
	f.Fuzz(func(t *testing.T, sec, nsec, offset int64) {
		tm := time.Unix(sec, nsec%1e9).In(time.FixedZone("", int(offset%(24*3600))))
		want, wantErr := json.Marshal(tm)
		got, err := jsonenc.AppendTime(nil, tm)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("AppendTime(%v): error %v, encoding/json's %v", tm, err, wantErr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("AppendTime(%v) = %s, encoding/json writes %s", tm, got, want)
		}
	})
}
