package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/recording"
	"github.com/webhookd/webhookd/signature"
)

// Options configures a Runner.
type Options struct {
	// Target is the base URL of the webhookd to replay against; a line's
	// path is appended to it.
	Target string
	// Config is the target's configuration. When set, deliveries of a
	// source that verifies signatures are re-signed, with a fresh timestamp,
	// using its scheme and first secret, except on lines that record a 401:
	// those were refused for their signature and keep it. When nil,
	// recorded signatures are sent as they are.
	Config *configs.Config
	// Concurrency is how many deliveries may be in flight; 1 (the default)
	// sends them one after another in file order.
	Concurrency int
	// Rate caps how many deliveries start per second; 0 is no cap.
	Rate float64
	// Expect compares each answer with the decision and status its line
	// records; a difference is a mismatch.
	Expect bool
	// Source, when set, replays only the lines of that source.
	Source string
	// Timeout bounds each request; 0 means 30 seconds.
	Timeout time.Duration
	// Progress, when set, is called after each delivery with how far the
	// replay has got; calls never overlap.
	Progress func(Progress)
}

// Runner replays recorded deliveries against a target.
type Runner struct {
	opts   Options
	target string
	client *http.Client
	now    func() time.Time
}

// NewRunner checks opts and returns a runner.
func NewRunner(opts Options) (*Runner, error) {
	u, err := url.Parse(opts.Target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("target: %q is not an http(s) URL such as http://127.0.0.1:8080", opts.Target)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 1
	}
	if opts.Concurrency < 0 {
		return nil, fmt.Errorf("concurrency: must be at least 1 (got %d)", opts.Concurrency)
	}
	// Below a delivery every 1,000 seconds, the schedule of a long
	// recording would overflow a Duration.
	if opts.Rate != 0 && !(opts.Rate >= 0.001 && opts.Rate <= math.MaxFloat64) {
		return nil, fmt.Errorf("rate: must be at least 0.001 deliveries per second, and finite (got %g)", opts.Rate)
	}
	switch {
	case opts.Timeout < 0:
		return nil, fmt.Errorf("timeout: must not be negative (got %s)", opts.Timeout)
	case opts.Timeout == 0:
		opts.Timeout = 30 * time.Second
	}
	if opts.Source != "" && opts.Config != nil {
		if _, ok := opts.Config.Source(opts.Source); !ok {
			return nil, fmt.Errorf("source: %q is not in the configuration", opts.Source)
		}
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = opts.Concurrency
	return &Runner{
		opts:   opts,
		target: strings.TrimSuffix(opts.Target, "/"),
		client: &http.Client{
			Transport: transport,
			Timeout:   opts.Timeout,
			// A redirect answers the delivery; following it would send the body elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		now: time.Now,
	}, nil
}

// Run replays lines and reports on every one sent. A delivery that fails
// (target down, an answer without a decision) is reported on its line and
// the run goes on. When ctx ends first, the lines not yet sent are left out
// of the report and Run returns ctx's error with it.
func (r *Runner) Run(ctx context.Context, lines []recording.Line) (*Report, error) {
	if r.opts.Source != "" {
		var mine []recording.Line
		for _, l := range lines {
			if l.SourceName() == r.opts.Source {
				mine = append(mine, l)
			}
		}
		lines = mine
	}
	report := &Report{Target: r.target, Expect: r.opts.Expect, Started: r.now()}
	results := make([]*Result, len(lines))
	jobs := make(chan int)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		progress = Progress{Total: len(lines), Expect: r.opts.Expect}
	)
	start := time.Now()
	for range r.opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				res := r.send(ctx, lines[i])
				results[i] = &res
				mu.Lock()
				progress.Sent++
				if res.Mismatch {
					progress.Mismatches++
				}
				if res.Decision == Failed {
					progress.Errors++
				}
				if r.opts.Progress != nil {
					progress.Elapsed = time.Since(start)
					r.opts.Progress(progress)
				}
				mu.Unlock()
			}
		}()
	}
	err := r.dispatch(ctx, jobs, len(lines), start)
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)

	for _, res := range results {
		if res != nil {
			report.Results = append(report.Results, *res)
		}
	}
	report.Summary = summarize(report.Results, elapsed)
	return report, err
}

// dispatch hands out line indexes in file order, paced by the rate: a line
// goes no sooner than one interval after the line before it went, so the
// lines a slow answer held up do not follow it in a burst.
func (r *Runner) dispatch(ctx context.Context, jobs chan<- int, n int, start time.Time) error {
	due := start
	for i := range n {
		if r.opts.Rate > 0 {
			if wait := time.Until(due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				}
			}
		}
		select {
		case jobs <- i:
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.opts.Rate > 0 {
			due = time.Now().Add(time.Duration(float64(time.Second) / r.opts.Rate))
		}
	}
	return nil
}

// skipped are headers a replay does not copy: hop-by-hop headers belong to
// the recorded connection, Content-Length and Host are the new request's
// own, and a recorded Accept-Encoding would stop the client from
// decompressing the answer it has to read.
var skipped = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true, "Host": true, "Accept-Encoding": true,
}

// send replays one line.
func (r *Runner) send(ctx context.Context, l recording.Line) Result {
	res := Result{
		Line:             l.N,
		Source:           l.SourceName(),
		Method:           l.Method,
		Path:             l.Path,
		ExpectedDecision: l.Decision,
		ExpectedStatus:   l.Status,
	}
	fail := func(err error) Result {
		res.Decision, res.Error = Failed, err.Error()
		res.Mismatch = r.opts.Expect
		return res
	}
	body, err := l.Payload()
	if err != nil {
		return fail(err)
	}
	res.RequestID = r.requestIDOf(res.Source, l.Headers, body)
	h := make(http.Header, len(l.Headers))
	for name, values := range l.Headers {
		if skipped[http.CanonicalHeaderKey(name)] || redacted(values) {
			continue // a placeholder is never the right credential
		}
		for _, v := range values {
			h.Add(name, v)
		}
	}
	// A line recorded as refused with 401 keeps its signature: it was
	// refused for it, and a fresh one would turn a forgery into a delivery.
	if r.opts.Config != nil && l.Status != http.StatusUnauthorized {
		if src, ok := r.opts.Config.Source(res.Source); ok && src.Verify != nil {
			if err := signature.Resign(src.Verify.Signature(), h, body, r.now()); err != nil {
				return fail(fmt.Errorf("re-sign for source %s: %w", src.Name, err))
			}
		}
	}
	req, err := http.NewRequestWithContext(ctx, l.Method, r.target+l.Path, bytes.NewReader(body))
	if err != nil {
		return fail(fmt.Errorf("build request: %w", err))
	}
	req.Header = h
	start := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		res.setLatency(time.Since(start))
		return fail(err)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	res.setLatency(time.Since(start))
	res.Status = resp.StatusCode
	if err != nil {
		return fail(fmt.Errorf("read answer: %w", err))
	}
	var id string
	if res.Decision, id, err = decisionOf(resp, raw); err != nil {
		return fail(err)
	}
	if id != "" {
		res.RequestID = id
	}
	res.Mismatch = r.opts.Expect && ((l.Decision != "" && l.Decision != res.Decision) || (l.Status != 0 && l.Status != res.Status))
	return res
}

func redacted(values []string) bool {
	for _, v := range values {
		if v != recording.Redacted {
			return false
		}
	}
	return len(values) > 0
}

// decisionOf reads webhookd's decision from an answer: its Webhook-Decision
// header or its JSON "decision", and the request ID a decided answer names.
// An error answer ({"error": ...} with a 4xx or 5xx) is a rejection.
func decisionOf(resp *http.Response, raw []byte) (decision, requestID string, err error) {
	var body struct {
		Decision  string `json:"decision"`
		RequestID string `json:"request_id"`
		Error     string `json:"error"`
	}
	parsed := json.Unmarshal(raw, &body) == nil
	if d := resp.Header.Get("Webhook-Decision"); d != "" {
		return d, body.RequestID, nil
	}
	if parsed {
		switch {
		case body.Decision != "":
			return body.Decision, body.RequestID, nil
		case body.Error != "" && resp.StatusCode >= 400:
			return recording.Rejected, "", nil
		}
	}
	return "", "", fmt.Errorf("answer %d %s is not webhookd's (no decision): %s", resp.StatusCode, resp.Header.Get("Content-Type"), snippet(raw))
}

// requestIDOf reads a line's request ID as the target's source does, for
// the lines whose answer does not name it (a refusal, no answer): from the
// header or the JSON field the source's request_id selects. Without the
// target's configuration, or where the line lacks it, it is "".
func (r *Runner) requestIDOf(source string, headers map[string][]string, body []byte) string {
	if r.opts.Config == nil {
		return ""
	}
	src, ok := r.opts.Config.Source(source)
	if !ok {
		return ""
	}
	kind, arg, _ := strings.Cut(src.RequestID, ":")
	switch kind {
	case "header":
		for name, values := range headers {
			if strings.EqualFold(name, arg) && len(values) > 0 && values[0] != recording.Redacted {
				return values[0]
			}
		}
	case "json":
		segs := strings.Split(arg, ".")
		for i, seg := range segs {
			segs[i] = gjson.Escape(seg)
		}
		v := gjson.GetBytes(body, strings.Join(segs, "."))
		switch v.Type {
		case gjson.String:
			return v.Str
		case gjson.Number:
			return v.Raw
		}
	}
	return ""
}

// snippet quotes the start of an answer for an error message.
func snippet(raw []byte) string {
	const max = 80
	if len(raw) > max {
		return fmt.Sprintf("%q...", raw[:max])
	}
	return fmt.Sprintf("%q", raw)
}

// ErrFailed is what Report.Err wraps when a replay had mismatches or errors.
var ErrFailed = errors.New("replay failed")
