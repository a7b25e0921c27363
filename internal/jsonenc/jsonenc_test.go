package jsonenc_test

import (
	"bytes"
	"encoding/json"
	"testing"

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
