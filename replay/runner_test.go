package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/recording"
	"github.com/webhookd/webhookd/signature"
)

// arrival is one request as the test target saw it.
type arrival struct {
	method, uri string
	header      http.Header
	body        string
}

// target is a stand-in webhookd: it answers each request with answer and
// keeps what arrived.
type target struct {
	mu       sync.Mutex
	arrivals []arrival
}

func newTarget(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, body []byte)) (*target, string) {
	tg := &target{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tg.mu.Lock()
		tg.arrivals = append(tg.arrivals, arrival{r.Method, r.RequestURI, r.Header.Clone(), string(body)})
		tg.mu.Unlock()
		answer(w, r, body)
	}))
	t.Cleanup(srv.Close)
	return tg, srv.URL
}

// decide answers with the decision the body names, as {"d":"..."}.
func decide(w http.ResponseWriter, _ *http.Request, body []byte) {
	d, status := "accepted", 202
	if bytes.Contains(body, []byte(`"d":"duplicate"`)) {
		d, status = "duplicate", 200
	}
	var req struct {
		ID string `json:"id"`
	}
	json.Unmarshal(body, &req)
	w.Header().Set("Webhook-Decision", d)
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"decision":%q,"request_id":%q}`, d, req.ID)
}

func lines(t *testing.T, jsonl string) []recording.Line {
	t.Helper()
	var out []recording.Line
	r := recording.NewReader(strings.NewReader(jsonl))
	for {
		l, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
}

func run(t *testing.T, opts Options, ls []recording.Line) *Report {
	t.Helper()
	r, err := NewRunner(opts)
	if err != nil {
		t.Fatal(err)
	}
	report, err := r.Run(context.Background(), ls)
	if err != nil {
		t.Fatal(err)
	}
	return report
}

func TestRunnerSendsEachLineAsRecorded(t *testing.T) {
	tg, url := newTarget(t, decide)
	report := run(t, Options{Target: url + "/", Expect: true}, lines(t, `
{"path":"/hooks/a?x=1","headers":{"Content-Type":["application/json"],"X-Multi":["1","2"],"Connection":["keep-alive"],"Content-Length":["999"],"Host":["old.example"],"Accept-Encoding":["br"],"Authorization":["REDACTED"],"webhook-id":["msg_1"]},"body":"{\"d\":\"accepted\"}","decision":"accepted","status":202}
{"method":"PUT","path":"/hooks/b","body_base64":"eyJkIjoiZHVwbGljYXRlIn0=","decision":"duplicate","status":200}
{"path":"/hooks/a","body":"{\"d\":\"duplicate\"}","decision":"duplicate"}
`))
	if err := report.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tg.arrivals) != 3 {
		t.Fatalf("%d requests arrived, want 3", len(tg.arrivals))
	}
	first := tg.arrivals[0]
	if first.method != "POST" || first.uri != "/hooks/a?x=1" || first.body != `{"d":"accepted"}` {
		t.Errorf("first request: %+v", first)
	}
	if got := first.header.Values("X-Multi"); len(got) != 2 || first.header.Get("Webhook-Id") != "msg_1" || first.header.Get("Content-Type") != "application/json" {
		t.Errorf("recorded headers not sent: %v", first.header)
	}
	for name, recorded := range map[string]string{"Connection": "keep-alive", "Authorization": recording.Redacted, "Accept-Encoding": "br"} {
		if v := first.header.Get(name); v == recorded {
			t.Errorf("%s: %q was replayed", name, v)
		}
	}
	if first.header.Get("Authorization") != "" {
		t.Errorf("a redacted Authorization was sent: %q", first.header.Get("Authorization"))
	}
	if first.header.Get("Content-Length") != fmt.Sprint(len(first.body)) {
		t.Errorf("Content-Length %q: the recorded one was sent", first.header.Get("Content-Length"))
	}
	if second := tg.arrivals[1]; second.method != "PUT" || second.body != `{"d":"duplicate"}` {
		t.Errorf("second request: %+v", second)
	}

	s := report.Summary
	if s.Deliveries != 3 || s.Mismatches != 0 || s.Errors != 0 || len(s.Outcomes) != 2 ||
		s.Outcomes[0] != (Outcome{"accepted", 202, 1}) || s.Outcomes[1] != (Outcome{"duplicate", 200, 2}) {
		t.Errorf("summary = %+v", s)
	}
	if r := report.Results[1]; r.Line != 3 || r.Source != "b" || r.Decision != "duplicate" || r.Status != 200 {
		t.Errorf("result of line 3 = %+v", r)
	}
}

func TestRunnerReportsMismatchesAndBadAnswers(t *testing.T) {
	_, url := newTarget(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		switch r.URL.Path {
		case "/hooks/html":
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			io.WriteString(w, "<html>bad gateway</html>")
		case "/hooks/unknown":
			w.WriteHeader(404)
			io.WriteString(w, `{"error":"unknown source"}`)
		case "/hooks/json":
			io.WriteString(w, `{"decision":"stale"}`) // no header: the body says
		default:
			decide(w, r, body)
		}
	})
	var progress []Progress
	report := run(t, Options{Target: url, Expect: true, Progress: func(p Progress) { progress = append(progress, p) }}, lines(t, `
{"path":"/hooks/a","body":"{\"id\":\"req-1\"}","decision":"accepted","status":202}
{"path":"/hooks/a","body":"{\"id\":\"req-2\"}","decision":"duplicate","status":200}
{"path":"/hooks/html","body":"{}","decision":"accepted"}
{"path":"/hooks/unknown","body":"{}","decision":"rejected","status":404}
{"path":"/hooks/json","body":"{}","decision":"stale","status":201}
`))
	want := []struct {
		decision string
		status   int
		mismatch bool
	}{
		{"accepted", 202, false},
		{"accepted", 202, true}, // expected duplicate
		{Failed, 502, true},     // not webhookd's answer
		{recording.Rejected, 404, false},
		{"stale", 200, true}, // decision matches, status does not
	}
	if len(progress) != len(want) {
		t.Fatalf("%d progress calls for %d lines", len(progress), len(want))
	}
	mismatches, errs := 0, 0
	for i, w := range want {
		r := report.Results[i]
		if r.Decision != w.decision || r.Status != w.status || r.Mismatch != w.mismatch {
			t.Errorf("line %d: %+v, want %+v", r.Line, r, w)
		}
		// Progress counts as it goes what the summary counts at the end.
		if w.mismatch {
			mismatches++
		}
		if w.decision == Failed {
			errs++
		}
		if p := progress[i]; p.Sent != i+1 || p.Total != len(want) || p.Mismatches != mismatches || p.Errors != errs || !p.Expect {
			t.Errorf("progress after line %d: %+v, want %d sent, %d mismatches, %d errors", r.Line, p, i+1, mismatches, errs)
		}
	}

	if e := report.Results[2].Error; !strings.Contains(e, "502") || !strings.Contains(e, "bad gateway") {
		t.Errorf("error of a non-webhookd answer: %q", e)
	}
	if !errors.Is(report.Err(), ErrFailed) || report.Summary.Mismatches != 3 || report.Summary.Errors != 1 {
		t.Errorf("Err = %v, summary %+v", report.Err(), report.Summary)
	}
	var out strings.Builder
	if err := report.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"LINE  REQUEST_ID  REQUEST           EXPECTED       GOT",
		"3     req-2       POST /hooks/a     duplicate 200  accepted 202", // the line numbers count the blank first line
		"6     -           POST /hooks/json  stale 201      stale 200",
		"LINE  REQUEST_ID  REQUEST           ERROR",
		"4     -           POST /hooks/html  answer 502 text/html is not webhookd's",
	} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("summary lacks %q:\n%s", row, out.String())
		}
	}
}

func TestRunnerWithoutExpectCountsNoMismatch(t *testing.T) {
	_, url := newTarget(t, decide)
	report := run(t, Options{Target: url}, lines(t, `{"path":"/hooks/a","body":"{}","decision":"stale"}`))
	if report.Summary.Mismatches != 0 || report.Err() != nil {
		t.Errorf("without Expect: %+v, %v", report.Summary, report.Err())
	}
}

func TestRunnerTargetDownReportsEveryLine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	report := run(t, Options{Target: "http://" + addr, Expect: true, Concurrency: 2}, lines(t, `
{"path":"/hooks/a","body":"{}","decision":"accepted","status":202}
{"path":"/hooks/a","body":"{}","decision":"duplicate","status":200}
{"path":"/hooks/b","body":"{}"}
`))
	if len(report.Results) != 3 {
		t.Fatalf("%d results, want one per line", len(report.Results))
	}
	for _, r := range report.Results {
		if r.Decision != Failed || r.Status != 0 || !strings.Contains(r.Error, "connection refused") {
			t.Errorf("line %d: %+v", r.Line, r)
		}
	}
	if report.Summary.Errors != 3 || report.Err() == nil {
		t.Errorf("summary %+v, Err %v", report.Summary, report.Err())
	}
}

func TestRunnerResignsWithTheTargetsConfig(t *testing.T) {
	const secret = "whsec_dGVzdC1vbmx5LXJlc2lnbi1zZWNyZXQ=" // test only
	cfg, err := configs.Parse([]byte(`
sources:
  - name: acme
    verify: { scheme: standard-webhooks, secrets: ["` + secret + `"] }
  - name: plain
    request_id: json:id
`))
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := signature.New(cfg.Sources[0].Verify.Signature())
	if err != nil {
		t.Fatal(err)
	}
	_, url := newTarget(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if strings.HasPrefix(r.URL.Path, "/hooks/acme") {
			if err := verifier.Verify(r.Header, body, time.Now()); err != nil {
				w.WriteHeader(401)
				fmt.Fprintf(w, `{"error":%q}`, err.Error())
				return
			}
		}
		decide(w, r, body)
	})
	// Signed long ago, with the right secret: only a fresh signature passes.
	old := time.Date(2023, 11, 14, 0, 0, 0, 0, time.UTC)
	body := `{"id":"1"}`
	h, err := signature.SignStandard(secret, "msg_1", old, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	recorded := fmt.Sprintf(`{"path":"/hooks/acme","headers":{"webhook-id":[%q],"webhook-timestamp":[%q],"webhook-signature":[%q]},"body":%q,"decision":"accepted","status":202}
{"path":"/hooks/plain","body":"{}","decision":"accepted","status":202}
{"path":"/hooks/acme","body":"{}","decision":"accepted","status":202}
{"path":"/hooks/acme","headers":{"webhook-id":["msg_2"],"webhook-timestamp":[%q],"webhook-signature":["v1,Zm9yZ2Vk"]},"body":"{}","decision":"rejected","status":401}`,
		h["webhook-id"], h["webhook-timestamp"], h["webhook-signature"], body, h["webhook-timestamp"])

	report := run(t, Options{Target: url, Expect: true}, lines(t, recorded))
	if r := report.Results[0]; r.Decision != recording.Rejected || r.Status != 401 {
		t.Errorf("old signature without re-signing: %+v", r)
	}

	report = run(t, Options{Target: url, Expect: true, Config: cfg}, lines(t, recorded))
	if r := report.Results[0]; r.Decision != "accepted" || r.Mismatch {
		t.Errorf("re-signed delivery: %+v", r)
	}
	if r := report.Results[1]; r.Decision != "accepted" {
		t.Errorf("unsigned source: %+v", r)
	}
	// Standard Webhooks re-signing needs the recorded webhook-id.
	if r := report.Results[2]; r.Decision != Failed || !strings.Contains(r.Error, "re-sign for source acme") {
		t.Errorf("re-signing without webhook-id: %+v", r)
	}
	// A line refused for its signature keeps it: re-signing would let a forgery in.
	if r := report.Results[3]; r.Decision != recording.Rejected || r.Status != 401 || r.Mismatch {
		t.Errorf("recorded forgery: %+v", r)
	}
}

// A line whose answer names no request ID (a refusal, no answer) is named
// by the request ID the target's configuration reads from it, in the
// summary's rows and in the JSON report.
func TestRunnerNamesTheRequestIDOfEveryLine(t *testing.T) {
	cfg, err := configs.Parse([]byte(`
sources:
  - name: nested
    request_id: json:data.id
  - name: header
    request_id: header:X-Event-Id
  - name: number
    request_id: json:n
`))
	if err != nil {
		t.Fatal(err)
	}
	_, url := newTarget(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.WriteHeader(401)
		io.WriteString(w, `{"error":"bad signature"}`)
	})
	recorded := lines(t, `{"path":"/hooks/nested","body":"{\"data\":{\"id\":\"evt_1\"}}","decision":"accepted","status":202}
{"path":"/hooks/header","headers":{"x-event-id":["evt_2"]},"body":"{}","decision":"accepted","status":202}
{"path":"/hooks/number","body":"{\"n\":42}","decision":"accepted","status":202}
{"path":"/hooks/nested","body":"{}","decision":"accepted","status":202}
{"path":"/hooks/unknown","body":"{\"data\":{\"id\":\"evt_5\"}}","decision":"accepted","status":202}`)

	report := run(t, Options{Target: url, Expect: true, Config: cfg}, recorded)
	for i, want := range []string{"evt_1", "evt_2", "42", "", ""} {
		if r := report.Results[i]; r.RequestID != want || r.Decision != recording.Rejected {
			t.Errorf("line %d: request ID %q (%s), want %q", r.Line, r.RequestID, r.Decision, want)
		}
	}
	var out strings.Builder
	if err := report.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "2     evt_2       POST /hooks/header   accepted 202  rejected 401") {
		t.Errorf("no row names evt_2:\n%s", out.String())
	}
	path := filepath.Join(t.TempDir(), "report.json")
	if err := report.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(raw, &back); err != nil || back.Results[0].RequestID != "evt_1" {
		t.Errorf("the JSON report's first result: %+v (%v)", back.Results[0], err)
	}

	// Without the configuration, only answers name request IDs.
	report = run(t, Options{Target: url, Expect: true}, recorded)
	if r := report.Results[0]; r.RequestID != "" {
		t.Errorf("without --config: request ID %q, want none", r.RequestID)
	}
}

func TestRunnerSourceFilter(t *testing.T) {
	tg, url := newTarget(t, decide)
	report := run(t, Options{Target: url, Source: "b"}, lines(t, `
{"path":"/hooks/a","body":"{}"}
{"path":"/hooks/b","body":"{}"}
{"source":"b","path":"/elsewhere","body":"{}"}
`))
	if report.Summary.Deliveries != 2 || len(tg.arrivals) != 2 || tg.arrivals[1].uri != "/elsewhere" {
		t.Errorf("%d deliveries, arrivals %+v", report.Summary.Deliveries, tg.arrivals)
	}
}

// TestRunnerConcurrency holds every request until four are in flight: a
// runner that sent fewer at once would leave them waiting out the safety
// timeout and fail the count.
func TestRunnerConcurrency(t *testing.T) {
	const n = 4
	var (
		mu       sync.Mutex
		inflight int
		most     int
		all      = make(chan struct{})
	)
	_, url := newTarget(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		mu.Lock()
		inflight++
		most = max(most, inflight)
		if inflight == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		}
		mu.Lock()
		inflight--
		mu.Unlock()
		decide(w, r, body)
	})
	report := run(t, Options{Target: url, Concurrency: n, Rate: 1000}, lines(t, strings.Repeat(`{"path":"/hooks/a","body":"{}"}`+"\n", n)))
	if most != n || report.Summary.Deliveries != n {
		t.Errorf("at most %d in flight, %d delivered; want %d", most, report.Summary.Deliveries, n)
	}
}

// --rate caps the pace: after a slow answer, the lines it held up go one
// interval apart, not in a burst.
func TestRateIsACapAfterASlowAnswer(t *testing.T) {
	var (
		mu     sync.Mutex
		starts []time.Time
	)
	_, url := newTarget(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		mu.Lock()
		starts = append(starts, time.Now())
		first := len(starts) == 1
		mu.Unlock()
		if first {
			time.Sleep(time.Second)
		}
		decide(w, r, body)
	})
	const rate = 5 // one every 200 ms
	run(t, Options{Target: url, Rate: rate}, lines(t, strings.Repeat(`{"path":"/hooks/a","body":"{}"}`+"\n", 8)))
	for i := range starts {
		n := 0
		for j := i; j < len(starts) && starts[j].Sub(starts[i]) < time.Second; j++ {
			n++
		}
		if n > rate+1 {
			t.Fatalf("%d deliveries started within a second of delivery %d at --rate %d/s", n, i+1, rate)
		}
	}
}

func TestRunnerStopsWhenCancelled(t *testing.T) {
	_, url := newTarget(t, decide)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := NewRunner(Options{Target: url, Progress: func(Progress) { cancel() }})
	if err != nil {
		t.Fatal(err)
	}
	report, err := r.Run(ctx, lines(t, strings.Repeat(`{"path":"/hooks/a","body":"{}"}`+"\n", 5)))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if n := len(report.Results); n == 0 || n > 2 {
		t.Errorf("%d lines reported after cancelling on the first", n)
	}
}

func TestNewRunnerRefusesBadOptions(t *testing.T) {
	for _, opts := range []Options{
		{Target: "127.0.0.1:8080"},
		{Target: "ftp://x"},
		{Target: "http://x", Concurrency: -1},
		{Target: "http://x", Rate: -5},
		{Target: "http://x", Rate: math.NaN()},
		{Target: "http://x", Rate: math.Inf(1)},
		{Target: "http://x", Rate: 1e-300},
		{Target: "http://x", Timeout: -time.Second},
	} {
		if _, err := NewRunner(opts); err == nil {
			t.Errorf("%+v accepted", opts)
		}
	}
}
