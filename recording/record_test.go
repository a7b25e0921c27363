package recording

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		wantErr    string // "" for a valid line
		check      func(t *testing.T, r Record)
	}{
		{name: "recorded line", line: `{"time":"2026-01-02T03:04:05.123456789Z","source":"billing","method":"POST","path":"/hooks/billing","headers":{"Content-Type":["application/json"]},"body_base64":"eyJhIjoxfQ==","status":202,"decision":"accepted"}`,
			check: func(t *testing.T, r Record) {
				body, _ := r.Payload()
				if string(body) != `{"a":1}` || r.Time.Nanosecond() != 123456789 || r.Status != 202 || r.Decision != "accepted" {
					t.Errorf("got %+v, body %q", r, body)
				}
			}},
		{name: "hand-written, method defaults to POST", line: `{"path":"/hooks/shop","body":"{\"a\":1}","decision":"duplicate"}`,
			check: func(t *testing.T, r Record) {
				if r.Method != "POST" || r.SourceName() != "shop" || r.Status != 0 {
					t.Errorf("got %+v, source %q", r, r.SourceName())
				}
			}},
		{name: "source from a path with a query", line: `{"path":"/hooks/shop?x=1"}`,
			check: func(t *testing.T, r Record) {
				if r.SourceName() != "shop" {
					t.Errorf("source = %q", r.SourceName())
				}
			}},
		{name: "misspelt field", line: `{"path":"/hooks/a","decison":"accepted"}`, wantErr: `unknown field "decison"`},
		{name: "two bodies", line: `{"path":"/hooks/a","body":"x","body_base64":"eA=="}`, wantErr: "both set"},
		{name: "bad base64", line: `{"path":"/hooks/a","body_base64":"!!"}`, wantErr: "body_base64"},
		{name: "unknown decision", line: `{"path":"/hooks/a","decision":"accept"}`, wantErr: "decision"},
		{name: "status out of range", line: `{"path":"/hooks/a","status":42}`, wantErr: "status"},
		{name: "relative path", line: `{"path":"hooks/a"}`, wantErr: "path"},
		{name: "bad method", line: `{"path":"/hooks/a","method":"PO ST"}`, wantErr: "method"},
		{name: "bad header name", line: `{"path":"/hooks/a","headers":{"X Y":["1"]}}`, wantErr: "header name"},
		{name: "header value with a newline", line: `{"path":"/hooks/a","headers":{"X-Y":["1\r\nEvil: 1"]}}`, wantErr: "line break"},
		{name: "trailing value", line: `{"path":"/hooks/a"} {}`, wantErr: "more than one value"},
		{name: "not an object", line: `[1]`, wantErr: "parse json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseLine([]byte(tc.line))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}

func TestReaderNumbersLinesAndSkipsBlankOnes(t *testing.T) {
	in := "\n" + `{"path":"/hooks/a"}` + "\n\n  \n" + `{"path":"/hooks/b"}` + "\n" + `{"path":"x"}`
	r := NewReader(strings.NewReader(in))
	for _, want := range []struct {
		n    int
		path string
	}{{2, "/hooks/a"}, {5, "/hooks/b"}} {
		l, err := r.Next()
		if err != nil || l.N != want.n || l.Path != want.path {
			t.Fatalf("Next = %d %q %v, want line %d %s", l.N, l.Path, err, want.n, want.path)
		}
	}
	// The last line has no newline and a bad path: the error names it.
	if _, err := r.Next(); err == nil || !strings.HasPrefix(err.Error(), "line 6: path") {
		t.Fatalf("err = %v, want line 6: path...", err)
	}
}

func TestReadFileErrors(t *testing.T) {
	if _, _, err := ReadFile(t.TempDir() + "/missing.jsonl"); err == nil || !strings.Contains(err.Error(), "read recording") {
		t.Errorf("missing file: %v", err)
	}
	lines, torn, err := ReadFile("../testdata/recordings/signed.jsonl")
	if err != nil || len(torn) > 0 {
		t.Fatal(err, torn)
	}
	if len(lines) == 0 || lines[0].N != 1 || lines[0].Headers["Authorization"][0] != Redacted {
		t.Errorf("signed.jsonl read as %+v", lines)
	}
}

func TestShippedRecordingsParse(t *testing.T) {
	for _, name := range []string{"stripe-retries", "out-of-order", "reused-request-id", "signed"} {
		lines, torn, err := ReadFile("../testdata/recordings/" + name + ".jsonl")
		if err != nil || len(torn) > 0 {
			t.Fatal(err, torn)
		}
		for _, l := range lines {
			if l.Decision == "" || l.Status == 0 {
				t.Errorf("%s line %d expects nothing", name, l.N)
			}
		}
	}
}

// FuzzParseLine checks that no line crashes the parser, and that every
// line it takes comes back unchanged through the recorder's encoding.
func FuzzParseLine(f *testing.F) {
	for _, seed := range []string{
		`{"time":"2026-01-02T03:04:05Z","source":"billing","method":"POST","path":"/hooks/billing","headers":{"A":["1","2"]},"body_base64":"eyJhIjoxfQ==","status":202,"decision":"accepted"}`,
		`{"path":"/hooks/shop","body":"{\"a\":1}","decision":"rejected","status":401}`,
		`{"path":"/hooks/a","body":"\u00e9\ud83d\ude00 <&> \u2028","headers":{"X":["\"q\" \\ \t"]}}`,
		`{"time":"9999-12-31T23:59:59.999999999+01:00","path":"/","headers":{}}`,
		`{"path":"/hooks/a"} x`,
		`{"path":null,"headers":{"X":null}}`,
		`{}`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseLine(line)
		if err != nil {
			return
		}
		if _, err := r.Payload(); err != nil {
			t.Fatalf("a parsed line has a bad body: %v", err)
		}
		encoded, err := appendRecord(nil, &r)
		if err != nil {
			if y := r.Time.Year(); y >= 0 && y <= 9999 {
				t.Fatalf("encode %+v: %v", r, err)
			}
			return // a year the format cannot hold parses but cannot be written back
		}
		if want, _ := json.Marshal(r); !jsonEqual(t, encoded, want) {
			t.Fatalf("appendRecord wrote %s, encoding/json %s", encoded, want)
		}
		again, err := ParseLine(encoded)
		if err != nil {
			t.Fatalf("re-parse %s: %v", encoded, err)
		}
		if !again.Time.Equal(r.Time) || again.Source != r.Source || again.Method != r.Method || again.Path != r.Path ||
			again.BodyBase64 != r.BodyBase64 || again.Body != r.Body || again.Status != r.Status || again.Decision != r.Decision ||
			len(again.Headers) != len(r.Headers) || fmt.Sprint(again.Headers) != fmt.Sprint(r.Headers) {
			t.Fatalf("round trip changed %+v into %+v", r, again)
		}
	})
}

// jsonEqual compares two JSON documents by value; a null and an empty
// object for headers are the same record.
func jsonEqual(t *testing.T, a, b []byte) bool {
	var x, y map[string]any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	for _, m := range []map[string]any{x, y} {
		if m["headers"] == nil {
			m["headers"] = map[string]any{}
		}
	}
	return reflect.DeepEqual(x, y)
}

func TestReaderReportsReadErrors(t *testing.T) {
	r := NewReader(io.MultiReader(strings.NewReader(`{"path":"/a"}`+"\n"), errReader{}))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); !errors.Is(err, errBroken) || !strings.HasPrefix(err.Error(), "line 2") {
		t.Fatalf("err = %v", err)
	}
}

var errBroken = errors.New("broken")

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errBroken }

// Only the start of a line cut short, or zeroes where a write never landed,
// is skipped as torn; any other line that does not parse is reported.
func TestTornLinesAndMalformedOnes(t *testing.T) {
	good := `{"path":"/hooks/billing","body":"{}"}`
	for line, torn := range map[string]bool{
		`{"path":"/hooks/billing","bo`:                             true,
		`{"path":"/hooks/bil`:                                      true,
		"\x00\x00\x00\x00":                                         true,
		`{"path":"/hooks/billing"` + "\x00":                        true,
		`{"path":"/hooks/billing","body":"{}",}`:                   false, // a trailing comma
		`{'path':'/hooks/billing'}`:                                false,
		`{"path":"/hooks/billing","body":"{}"}{"path":"/hooks/x"}`: false,
		`{"path":"/hooks/billing","decison":"accepted"}`:           false,
	} {
		path := filepath.Join(t.TempDir(), "r.jsonl")
		if err := os.WriteFile(path, []byte(good+"\n"+line+"\n"+good+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		lines, skipped, err := ReadFile(path)
		switch {
		case torn && (err != nil || len(lines) != 2 || !slices.Equal(skipped, []int{2})):
			t.Errorf("%q: %d lines, skipped %v, %v; want it skipped as torn", line, len(lines), skipped, err)
		case !torn && (err == nil || !strings.Contains(err.Error(), "line 2")):
			t.Errorf("%q: %d lines, skipped %v, %v; want an error naming line 2", line, len(lines), skipped, err)
		}
	}
}
