package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// serve opens f's server on loopback and returns its public URL.
func (f *fixture) serve(t *testing.T) string {
	t.Helper()
	f.server.publicAddr, f.server.adminAd = "127.0.0.1:0", "127.0.0.1:0"
	if err := f.server.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.server.Shutdown(context.Background()) })
	return "http://" + f.server.PublicAddr()
}

// oneByteReader hides its length from Go's client, which then sends the
// body chunked.
type oneByteReader struct{ io.Reader }

// A body over max_body gets its 413, with Webhook-Decision, on every try:
// declared or chunked, a little or far over. The server drains what the
// client still sends before it closes, so the client is not reset before
// it reads the answer (without the drain, most tries at 2× and 10× ended
// in a reset or broken pipe).
func TestOversizedBodiesAlwaysGetTheir413(t *testing.T) {
	const maxBody = 1 << 20
	f := newFixtureFor(t, strings.Replace(testConfig, "max_body: 2048", fmt.Sprintf("max_body: %d", maxBody), 1), nil)
	m := &rejections{}
	f.server.Metrics = m
	url := f.serve(t) + "/hooks/billing"
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	const tries = 20
	want := 0
	for _, size := range []int{maxBody * 11 / 10, 2 * maxBody, 10 * maxBody} {
		body := `{"request_id":"big","pad":"` + strings.Repeat("x", size) + `"}`
		for _, chunked := range []bool{false, true} {
			for i := range tries {
				var r io.Reader = strings.NewReader(body)
				if chunked {
					r = oneByteReader{r}
				}
				resp, err := client.Post(url, "application/json", r)
				if err != nil {
					t.Fatalf("%d bytes, chunked %v, try %d: %v", size, chunked, i, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 413 || resp.Header.Get("Webhook-Decision") != "rejected" {
					t.Fatalf("%d bytes, chunked %v, try %d: %d Webhook-Decision=%q, want 413 rejected",
						size, chunked, i, resp.StatusCode, resp.Header.Get("Webhook-Decision"))
				}
				want++
			}
		}
	}
	if f.hasReceipt("billing", "big") {
		t.Error("a receipt was written for a body over max_body")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	declared := slices.DeleteFunc(slices.Clone(m.got), func(r string) bool { return r != "billing/too_large" })
	chunked := slices.DeleteFunc(slices.Clone(m.got), func(r string) bool { return r != "unknown/too_large" })
	if len(declared) != want/2 || len(chunked) != want/2 || len(m.got) != want {
		t.Errorf("rejections counted: %d billing/too_large, %d unknown/too_large, %d in all; want %d, %d, %d",
			len(declared), len(chunked), len(m.got), want/2, want/2, want)
	}
}

// A Content-Length that lies, smaller than the body sent: the declared
// bytes are the request, the rest cannot be parsed as the next one. The
// sender reads both answers and sends its body whole, into the drain,
// rather than into a reset.
func TestBodyLongerThanItsContentLengthIsAnswered(t *testing.T) {
	f := newFixtureFor(t, strings.Replace(testConfig, "max_body: 2048", "max_body: 1048576", 1), nil)
	f.serve(t)
	conn, err := net.Dial("tcp", f.server.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sent := make(chan error, 1)
	go func() {
		_, err := io.WriteString(conn, "POST /hooks/billing HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"+strings.Repeat("x", 10<<20))
		sent <- err
	}()
	br := bufio.NewReader(conn)
	for _, want := range []int{400, 431} { // the request's body lacks a request ID; the rest is a "header" without end
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer that should be %d: %v", want, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || resp.Header.Get("Webhook-Decision") != "rejected" {
			t.Errorf("got %d Webhook-Decision=%q, want %d rejected", resp.StatusCode, resp.Header.Get("Webhook-Decision"), want)
		}
	}
	if err := <-sent; err != nil {
		t.Errorf("sending: %v", err)
	}
}

// The drain is bounded: a sender that goes on and on past 16 × max_body
// is cut off, after its answer.
func TestDrainIsBounded(t *testing.T) {
	f := newFixture(t, nil) // max_body 2048: the drain ends after 32 KiB
	f.serve(t)
	conn, err := net.Dial("tcp", f.server.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sent := make(chan error, 1)
	go func() {
		_, err := io.WriteString(conn, "POST /hooks/billing HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n"+strings.Repeat("x", 64<<20))
		sent <- err
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("got %d, want 413", resp.StatusCode)
	}
	if err := <-sent; err == nil {
		t.Error("64 MiB past the answer were all taken in")
	}
}

// A client that asks before it sends a body over max_body hears 413 at
// once, never "100 Continue".
func TestDeclaredOversizedBodyIsRefusedBeforeContinue(t *testing.T) {
	f := newFixture(t, nil)
	url := f.serve(t) + "/hooks/billing"
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	defer client.CloseIdleConnections()
	continued := false
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got100Continue: func() { continued = true }})
	body := `{"request_id":"big","pad":"` + strings.Repeat("x", 3000) + `"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Expect", "100-continue")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answer map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		t.Errorf("413 answer is not JSON: %v", err)
	}
	resp.Body.Close()
	if continued || resp.StatusCode != 413 || resp.Header.Get("Webhook-Decision") != "rejected" {
		t.Errorf("got 100 Continue %v, then %d Webhook-Decision=%q; want no 100 Continue, 413 rejected",
			continued, resp.StatusCode, resp.Header.Get("Webhook-Decision"))
	}
	// Within max_body, the client is told to go on.
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(billing("small", "s", 1)))
	req.Header.Set("Expect", "100-continue")
	if resp, err = client.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !continued || resp.StatusCode != 202 {
		t.Errorf("a body within max_body: 100 Continue %v, then %d; want 100 Continue, 202", continued, resp.StatusCode)
	}
}

// The requests the HTTP server refuses before any route runs are answered
// like every other refusal: Webhook-Decision and one counted reason.
func TestRequestsTheServerRefusesAreCounted(t *testing.T) {
	f := newFixture(t, nil)
	m := &rejections{}
	f.server.Metrics = m
	core, logs := observer.New(zapcore.InfoLevel)
	f.server.logger = zap.New(core)
	f.server.Public().Server().ReadTimeout = 200 * time.Millisecond // for the header that never ends
	f.serve(t)
	post := "POST /hooks/billing HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\nContent-Type: application/json\r\n"
	body := billing("r1", "s", 1)
	for _, tc := range []struct {
		name    string
		request string
		status  int
		reason  string
	}{
		{"many headers", post + strings.Repeat("X-Pad: "+strings.Repeat("p", 100)+"\r\n", 100) + "\r\n", 431, "unknown/too_large"},
		{"a huge header", post + "X-Pad: " + strings.Repeat("p", 10000) + "\r\n\r\n", 431, "unknown/too_large"},
		{"NUL in a header", post + "X-Pad: a\x00b\r\nContent-Length: 2\r\n\r\n{}", 400, "unknown/invalid"},
		{"CR in a header", post + "X-Pad: a\rb\r\nContent-Length: 2\r\n\r\n{}", 400, "unknown/invalid"},
		{"a header that never ends", post + "X-Pad: a", 408, "unknown/timeout"},
		{"two Content-Lengths", post + fmt.Sprintf("Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s", len(body), len(body)+1, body), 400, "unknown/invalid"},
	} {
		m.mu.Lock()
		m.got = nil
		m.mu.Unlock()
		conn, err := net.Dial("tcp", f.server.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, tc.request)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		conn.Close()
		m.mu.Lock()
		got := m.got
		m.mu.Unlock()
		if resp.StatusCode != tc.status || resp.Header.Get("Webhook-Decision") != "rejected" || !slices.Equal(got, []string{tc.reason}) {
			t.Errorf("%s: %d Webhook-Decision=%q, counted %v; want %d rejected, counted [%s]",
				tc.name, resp.StatusCode, resp.Header.Get("Webhook-Decision"), got, tc.status, tc.reason)
		}
	}
	if f.hasReceipt("billing", "r1") {
		t.Error("a refused request wrote a receipt")
	}
	for _, line := range logs.All() {
		if strings.Contains(fmt.Sprint(line.Message, line.ContextMap()), "s3cret") {
			t.Errorf("a log line quotes the request's credentials: %s %v", line.Message, line.ContextMap())
		}
	}
	if n := logs.FilterMessage("delivery").Len(); n != 6 {
		t.Errorf("%d delivery lines, want one per refused request", n)
	}
}

// A path with a trailing slash names no source: it is not taken for the
// source without one.
func TestTrailingSlashIsNoSource(t *testing.T) {
	f := newFixture(t, nil)
	m := &rejections{}
	f.server.Metrics = m
	for _, path := range []string{"billing/", "billing//"} {
		r := f.post(path, billing("slash", "s", 1))
		if r.status != 404 || r.header.Get("Webhook-Decision") != "rejected" {
			t.Errorf("%s: %d %v Webhook-Decision=%q, want 404 rejected", path, r.status, r.body, r.header.Get("Webhook-Decision"))
		}
	}
	if f.hasReceipt("billing", "slash") {
		t.Error("a receipt was written for a path with a trailing slash")
	}
	if want := []string{"unknown/unknown_source", "unknown/unknown_source"}; !slices.Equal(m.got, want) {
		t.Errorf("rejections counted: %v, want %v", m.got, want)
	}
}
