package recording

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Rejected is the decision a recording holds, besides webhookd's own
// (accepted, duplicate, stale, conflict), for a request refused before any
// decision: a bad signature, bad input, an unknown source.
const Rejected = "rejected"

// recordedDecisions are the decisions a recording line may expect.
var recordedDecisions = map[string]bool{
	"accepted": true, "duplicate": true, "stale": true, "conflict": true, Rejected: true,
}

// Record is one request as it reached webhookd, with webhookd's answer: one
// line of a recording.
type Record struct {
	Time    time.Time           `json:"time"`
	Source  string              `json:"source"`
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Headers map[string][]string `json:"headers"`
	// BodyBase64 is the exact body; recorders always write it, since
	// signatures cover exact bytes.
	BodyBase64 string `json:"body_base64,omitempty"`
	// Body is a UTF-8 body, for hand-written lines; a line sets one of the two.
	Body string `json:"body,omitempty"`
	// Status and Decision are what webhookd answered; on a hand-written
	// line, what the replay expects (zero or empty: no expectation).
	Status   int    `json:"status"`
	Decision string `json:"decision"`
}

// SourceName returns the line's source, or the one its path names
// (/hooks/{source}) when the line does not say.
func (r *Record) SourceName() string {
	if r.Source != "" {
		return r.Source
	}
	rest, ok := strings.CutPrefix(r.Path, "/hooks/")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// Payload returns the body's bytes.
func (r *Record) Payload() ([]byte, error) {
	if r.BodyBase64 == "" {
		return []byte(r.Body), nil
	}
	body, err := base64.StdEncoding.DecodeString(r.BodyBase64)
	if err != nil {
		return nil, fmt.Errorf("body_base64: %w", err)
	}
	return body, nil
}

// tokenRe is an RFC 9110 token: what method and header names are made of.
var tokenRe = regexp.MustCompile(`^[!#$%&'*+\-.^_` + "`" + `|~0-9A-Za-z]+$`)

// ParseLine parses one line of a recording and checks it can be sent.
// Unknown fields are refused: in a hand-written line, a misspelt
// "decison" would otherwise silently expect nothing.
func ParseLine(line []byte) (Record, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var r Record
	if err := dec.Decode(&r); err != nil {
		return Record{}, fmt.Errorf("parse json: %w", err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		return Record{}, errors.New("parse json: more than one value on the line")
	}
	if r.Method == "" {
		r.Method = "POST"
	}
	if err := r.check(); err != nil {
		return Record{}, err
	}
	return r, nil
}

func (r *Record) check() error {
	switch {
	case !tokenRe.MatchString(r.Method):
		return fmt.Errorf("method: %q is not an HTTP method", r.Method)
	case !strings.HasPrefix(r.Path, "/"):
		return fmt.Errorf("path: must start with / (got %q)", r.Path)
	case strings.ContainsAny(r.Path, " \t\r\n\x00"):
		return fmt.Errorf("path: %q holds whitespace or control characters", r.Path)
	case r.Body != "" && r.BodyBase64 != "":
		return errors.New("body and body_base64 are both set; give one")
	case r.Decision != "" && !recordedDecisions[r.Decision]:
		return fmt.Errorf("decision: %q is not one of accepted, duplicate, stale, conflict, rejected", r.Decision)
	case r.Status != 0 && (r.Status < 100 || r.Status > 599):
		return fmt.Errorf("status: %d is not an HTTP status", r.Status)
	}
	if _, err := r.Payload(); err != nil {
		return err
	}
	for name, values := range r.Headers {
		if !tokenRe.MatchString(name) {
			return fmt.Errorf("headers: %q is not a header name", name)
		}
		for _, v := range values {
			if strings.ContainsAny(v, "\r\n\x00") {
				return fmt.Errorf("headers: %s: value holds a line break or NUL", name)
			}
		}
	}
	return nil
}

// Line is a record with its line number in the recording, for reports.
type Line struct {
	N int `json:"line"`
	Record
}

// Reader reads a recording line by line. Blank lines are skipped, and so
// are torn ones: a write that failed, or a machine that lost power, can
// leave the start of a line (or zeroes), and the recorder starts the next
// line on a fresh one. Any other line that does not parse is an error.
type Reader struct {
	br   *bufio.Reader
	n    int
	torn []int
}

// NewReader returns a reader of the recording r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next line; io.EOF after the last. An error names the
// line at fault.
func (r *Reader) Next() (Line, error) {
	for {
		raw, err := r.br.ReadBytes('\n')
		if len(raw) == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				return Line{}, io.EOF
			}
			return Line{}, fmt.Errorf("line %d: %w", r.n+1, err)
		}
		r.n++
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		if isTorn(raw) {
			r.torn = append(r.torn, r.n)
			continue
		}
		rec, perr := ParseLine(raw)
		if perr != nil {
			return Line{}, fmt.Errorf("line %d: %w", r.n, perr)
		}
		return Line{N: r.n, Record: rec}, nil
	}
}

// isTorn reports whether raw is the start of a JSON value cut short, or
// holds the NUL bytes a file system leaves where a write never landed.
func isTorn(raw []byte) bool {
	if bytes.IndexByte(raw, 0) >= 0 {
		return true
	}
	var v json.RawMessage
	return errors.Is(json.NewDecoder(bytes.NewReader(bytes.TrimRight(raw, "\r\n"))).Decode(&v), io.ErrUnexpectedEOF)
}

// Torn returns the numbers of the torn lines skipped so far.
func (r *Reader) Torn() []int { return r.torn }

// ReadFile reads a whole recording, and returns the numbers of the torn
// lines it skipped.
func ReadFile(path string) (lines []Line, torn []int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read recording: %w", err)
	}
	defer f.Close()
	r := NewReader(f)
	for {
		l, err := r.Next()
		if errors.Is(err, io.EOF) {
			return lines, r.Torn(), nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read recording %s: %w", path, err)
		}
		lines = append(lines, l)
	}
}

// appendRecord appends r as one JSON line. It writes what encoding/json
// would, without reflection: the recorder encodes a line per delivery, and
// on a busy gateway its CPU is the decisions' CPU.
func appendRecord(dst []byte, r *Record) ([]byte, error) {
	if y := r.Time.Year(); y < 0 || y > 9999 {
		return dst, fmt.Errorf("time: year %d is outside 0-9999", y)
	}
	dst = append(dst, `{"time":"`...)
	dst = r.Time.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","source":`...)
	dst = appendString(dst, r.Source)
	dst = append(dst, `,"method":`...)
	dst = appendString(dst, r.Method)
	dst = append(dst, `,"path":`...)
	dst = appendString(dst, r.Path)
	dst = append(dst, `,"headers":{`...)
	first := true
	for name, values := range r.Headers {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(dst, name)
		dst = append(dst, ":["...)
		for i, v := range values {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, v)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, '}')
	if r.BodyBase64 != "" {
		dst = append(dst, `,"body_base64":`...)
		dst = appendString(dst, r.BodyBase64)
	}
	if r.Body != "" {
		dst = append(dst, `,"body":`...)
		dst = appendString(dst, r.Body)
	}
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = append(dst, `,"decision":`...)
	dst = appendString(dst, r.Decision)
	return append(dst, "}\n"...), nil
}

// appendString appends s as a JSON string. What a recording holds (base64,
// header values, paths) is nearly always plain ASCII, copied as it is; the
// rest goes through encoding/json, which knows every escape.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			quoted, _ := json.Marshal(s) // a string always encodes
			return append(dst, quoted...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
