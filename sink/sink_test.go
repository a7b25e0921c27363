package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd/recording"
	"github.com/webhookd/webhookd/signature"
)

// Test-only Standard Webhooks secrets.
const (
	secret      = "whsec_c2luay10ZXN0LXNlY3JldC10ZXN0LW9ubHk="
	otherSecret = "whsec_b3RoZXItc2VjcmV0LXRlc3Qtb25seQ=="
)

// syncBuffer is the sink's stdout, read by the test while the sink writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, cfg Config) (*Server, *syncBuffer) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	out := &syncBuffer{}
	s, err := NewServer(cfg, out, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, out
}

// forward posts body as webhookd's forwarder does, with headers.
func forward(t *testing.T, s *Server, body string, headers map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL()+"/billing", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		t.Fatalf("answer is not JSON: %v", err)
	}
	return resp.StatusCode, answer
}

func version(key, resource, v string) map[string]string {
	return map[string]string{"Idempotency-Key": key, "Webhook-Source": "billing", "Webhook-Resource": resource, "Webhook-Version": v}
}

// stats reads GET /stats over HTTP, as a demo would.
func stats(t *testing.T, s *Server) Stats {
	t.Helper()
	resp, err := http.Get(s.URL() + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestFailFirstFailsEachKeysFirstRequests(t *testing.T) {
	s, out := start(t, Config{FailFirst: 2})
	var got []int
	for _, key := range []string{"a", "a", "b", "a", "b", "b", "a"} {
		status, _ := forward(t, s, `{}`, map[string]string{"Idempotency-Key": key})
		got = append(got, status)
	}
	want := []int{503, 503, 503, 200, 503, 200, 200}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statuses %v, want %v", got, want)
		}
	}
	st := stats(t, s)
	if st.Requests != 7 || st.Keys["a"] != 4 || st.Keys["b"] != 3 || st.FailedInjected != 4 {
		t.Errorf("stats = %+v", st)
	}
	if !strings.Contains(out.String(), "POST /billing key=a version=- bytes=2 -> 503  injected failure 1 of 2") {
		t.Errorf("output lacks the first failure line:\n%s", out)
	}
}

func TestStatusAndFailRate(t *testing.T) {
	s, _ := start(t, Config{Status: 202})
	if status, _ := forward(t, s, `{}`, nil); status != 202 {
		t.Errorf("status %d, want the configured 202", status)
	}
	s, _ = start(t, Config{Status: 500})
	if status, _ := forward(t, s, `{}`, nil); status != 500 || stats(t, s).FailedInjected != 1 {
		t.Errorf("status %d, stats %+v; want 500 counted as injected", status, stats(t, s))
	}
	s, _ = start(t, Config{FailRate: 1})
	for range 3 {
		if status, _ := forward(t, s, `{}`, nil); status != 503 {
			t.Errorf("fail-rate 1: status %d", status)
		}
	}
	if st := stats(t, s); st.FailedInjected != 3 {
		t.Errorf("stats = %+v", st)
	}
}

func TestVerifySecret(t *testing.T) {
	s, _ := start(t, Config{VerifySecret: secret})
	body := `{"request_id":"req-1"}`
	sign := func(key string, ts time.Time) map[string]string {
		h, err := signature.SignStandard(key, "req-1", ts, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		h["Idempotency-Key"] = "req-1"
		return h
	}
	if status, _ := forward(t, s, body, sign(secret, time.Now())); status != 200 {
		t.Errorf("good signature: %d", status)
	}
	for name, h := range map[string]map[string]string{
		"other secret": sign(otherSecret, time.Now()),
		"old":          sign(secret, time.Now().Add(-time.Hour)),
		"unsigned":     {"Idempotency-Key": "req-1"},
	} {
		if status, answer := forward(t, s, body, h); status != 401 || !strings.Contains(answer["note"].(string), "bad signature") {
			t.Errorf("%s: %d %v, want 401", name, status, answer)
		}
	}
	if st := stats(t, s); st.BadSignatures != 3 || st.Requests != 4 {
		t.Errorf("stats = %+v", st)
	}
}

func TestOutOfOrderVersionsAreFlagged(t *testing.T) {
	s, out := start(t, Config{})
	for _, h := range []map[string]string{
		version("r1", "sub_1", "1"),
		version("r3", "sub_1", "3"),
		version("r2", "sub_1", "2"), // after 3
		version("r3", "sub_1", "3"), // a redelivery: not older
		version("r9", "sub_1", "10"),
		version("t2", "sub_2", "2026-01-02T00:00:00Z"),
		version("t1", "sub_2", "2026-01-01T23:00:00-02:00"), // later than t2 once the zone is counted
		version("t0", "sub_2", "2026-01-01T00:00:00Z"),      // earlier
	} {
		if status, _ := forward(t, s, `{}`, h); status != 200 {
			t.Fatalf("status %d", status)
		}
	}
	st := stats(t, s)
	want := []OutOfOrder{
		{Source: "billing", Resource: "sub_1", Version: "2", After: "3", Key: "r2"},
		{Source: "billing", Resource: "sub_2", Version: "2026-01-01T00:00:00Z", After: "2026-01-01T23:00:00-02:00", Key: "t0"},
	}
	if len(st.OutOfOrder) != len(want) || st.OutOfOrder[0] != want[0] || st.OutOfOrder[1] != want[1] {
		t.Errorf("out of order = %+v, want %+v", st.OutOfOrder, want)
	}
	if !strings.Contains(out.String(), "OUT OF ORDER: sub_1 version 2 after 3") {
		t.Errorf("output does not flag it:\n%s", out)
	}
}

// A failed attempt is not taken, so it does not move the latest version.
func TestFailedVersionsDoNotCount(t *testing.T) {
	s, _ := start(t, Config{FailFirst: 1})
	forward(t, s, `{}`, version("r5", "sub_1", "5")) // 503
	forward(t, s, `{}`, version("r4", "sub_1", "4")) // 503
	forward(t, s, `{}`, version("r4", "sub_1", "4")) // taken
	forward(t, s, `{}`, version("r5", "sub_1", "5")) // taken
	if st := stats(t, s); len(st.OutOfOrder) != 0 {
		t.Errorf("out of order = %+v", st.OutOfOrder)
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"9", "10", -1}, // as integers, not strings
		{"10", "10", 0},
		{"2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z", 1},
		{"2026-01-01T01:00:00+02:00", "2026-01-01T00:00:00Z", -1},
		{"b", "a", 1},
		{"10", "abc", -1}, // mixed: as strings
		// What webhookd orders, the sink orders alike: past int64, and in
		// lower case.
		{"999", "10000000000000000000", -1},
		{"2024-01-01t10:00:00+02:00", "2024-01-01t09:00:00z", -1},
	} {
		if got := compareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestRecordsRequestsInReplayFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sink.jsonl")
	s, _ := start(t, Config{Record: path, Redact: []string{"X-Api-Key"}, FailFirst: 1})
	forward(t, s, `{"a":1}`, map[string]string{"Idempotency-Key": "k", "Webhook-Source": "billing", "Authorization": "Bearer x", "X-Api-Key": "sk_live"})
	forward(t, s, `{"a":1}`, map[string]string{"Idempotency-Key": "k", "Webhook-Source": "billing"})
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	lines, torn, err := recording.ReadFile(path)
	if err != nil || len(torn) > 0 {
		t.Fatal(err, torn)
	}
	if len(lines) != 2 || lines[0].Status != 503 || lines[1].Status != 200 {
		t.Fatalf("recorded %+v", lines)
	}
	l := lines[0]
	body, _ := l.Payload()
	if l.Source != "billing" || l.Path != "/billing" || string(body) != `{"a":1}` || l.Headers["Authorization"][0] != recording.Redacted || l.Headers["X-Api-Key"][0] != recording.Redacted {
		t.Errorf("recorded %+v, body %q", l.Record, body)
	}
}

func TestNewServerRefusesBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{FailFirst: -1},
		{FailRate: 1.5},
		{Status: 99},
		{Latency: -time.Second},
		{VerifySecret: "not-whsec"},
	} {
		if _, err := NewServer(cfg, io.Discard, zaptest.NewLogger(t)); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	s, err := NewServer(Config{Listen: "127.0.0.1:-1"}, io.Discard, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Open on a bad address: %v", err)
	}
}

func TestLatencyDelaysTheAnswer(t *testing.T) {
	s, _ := start(t, Config{Latency: 50 * time.Millisecond})
	start := time.Now()
	forward(t, s, `{}`, nil)
	// A lower bound only: a loaded machine may be slower, never faster.
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("answered after %s", d)
	}
}
