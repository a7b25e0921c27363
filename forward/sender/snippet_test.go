package sender

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSnippet(t *testing.T) {
	long := strings.Repeat("a", maxSnippet-1)
	for _, tc := range []struct{ name, body, want string }{
		{"empty", "", ""},
		{"blank", " \r\n\t ", ""},
		{"json", `{"error":"db down"}`, `{"error":"db down"}`},
		{"one line", "<html>\n  <body>\r\n\tdown</body>\n</html>\n", "<html> <body> down</body> </html>"},
		{"control characters", "a\x00b\x1bc\x7f", `a\u0000b\u001bc\u007f`},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
		{"at the limit", strings.Repeat("a", maxSnippet), strings.Repeat("a", maxSnippet)},
		{"past the limit", strings.Repeat("a", maxSnippet+1), strings.Repeat("a", maxSnippet) + "…"},
		// é is two bytes: the limit cuts it after its first.
		{"a character cut", long + "é", long + "…"},
		{"a character whole", long[1:] + "é" + "z", long[1:] + "é…"},
	} {
		got := snippet([]byte(tc.body))
		if got != tc.want {
			t.Errorf("%s: snippet = %q, want %q", tc.name, got, tc.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("%s: snippet %q is not valid UTF-8", tc.name, got)
		}
	}
}
