package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd/configs"
)

const adminToken = "test-token"

// client is a test's view of a running gateway over real HTTP.
type client struct {
	t           *testing.T
	public      string
	admin       string
	adminHeader string
}

func (c *client) send(method, url, body string, headers map[string]string) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("%s %s: answer is not JSON: %q", method, url, raw)
	}
	return resp.StatusCode, out
}

func (c *client) post(source, body string) (int, map[string]any) {
	c.t.Helper()
	return c.send(http.MethodPost, "http://"+c.public+"/hooks/"+source, body, nil)
}

func (c *client) adminCall(method, path string) (int, map[string]any) {
	c.t.Helper()
	return c.send(method, "http://"+c.admin+path, "", map[string]string{"Authorization": "Bearer " + adminToken})
}

// items returns the "items" of an admin list.
func (c *client) items(path string) []any {
	c.t.Helper()
	status, body := c.adminCall(http.MethodGet, path)
	if status != 200 {
		c.t.Fatalf("GET %s: %d %v", path, status, body)
	}
	items, _ := body["items"].([]any)
	return items
}

// testConfig is a gateway on free loopback ports, forwarding billing to url.
func testConfig(t *testing.T, dataDir, url, listen, adminListen string) string {
	return fmt.Sprintf(`
listen: %q
data_dir: %q
shutdown_timeout: 5s
log: { level: warn }
admin: { listen: %q, token: %q }
sources:
  - name: billing
    request_id: json:request_id
    resource: json:object.id
    version: json:object.version
    routes:
      - url: %q
        max_attempts: 1000
        backoff: { initial: 10ms, max: 100ms }
        pass_headers: [X-Request-Id]
  - name: audit
    request_id: header:Idempotency-Key
`, listen, dataDir, adminListen, adminToken, url)
}

func startMain(t *testing.T, yaml string) (*Main, *client) {
	t.Helper()
	cfg, err := configs.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	m := NewMain(cfg, zaptest.NewLogger(t))
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, &client{t: t, public: m.Server.PublicAddr(), admin: m.Server.AdminAddr()}
}

// recorder is a downstream that counts deliveries per Idempotency-Key.
type recorder struct {
	mu   sync.Mutex
	keys map[string]int
	seen []string // "key version" in arrival order
}

func newRecorder(t *testing.T) (*recorder, *httptest.Server) {
	r := &recorder{keys: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	return r, srv
}

// serve records one request and answers 200.
func (r *recorder) serve(_ http.ResponseWriter, req *http.Request) {
	io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	r.keys[req.Header.Get("Idempotency-Key")]++
	r.seen = append(r.seen, req.Header.Get("Webhook-Resource")+" "+req.Header.Get("Webhook-Version"))
	r.mu.Unlock()
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys[key]
}

// checkOrder fails t where a resource's version arrived after a newer one,
// and returns how many requests arrived.
func (r *recorder) checkOrder(t *testing.T) int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	last := map[string]int{}
	for _, s := range r.seen {
		res, v, _ := strings.Cut(s, " ")
		n, _ := strconv.Atoi(v)
		if n < last[res] {
			t.Errorf("%s: version %d arrived after %d", res, n, last[res])
		}
		last[res] = n
	}
	return len(r.seen)
}

// forwardState returns the state of route in a receipt as the admin API
// answers it, or nil when the receipt names no such route.
func forwardState(receipt map[string]any, route string) any {
	routes, _ := receipt["routes"].([]any)
	for _, r := range routes {
		if r := r.(map[string]any); r["route"] == route {
			return r["state"]
		}
	}
	return nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func billing(requestID, object string, version int) string {
	return fmt.Sprintf(`{"request_id":%q,"object":{"id":%q,"version":%d}}`, requestID, object, version)
}

func TestEndToEndOverLoopback(t *testing.T) {
	rec, down := newRecorder(t)
	dir := t.TempDir()
	m, c := startMain(t, testConfig(t, dir, down.URL, "127.0.0.1:0", "127.0.0.1:0"))
	defer m.Close(context.Background())

	for _, step := range []struct {
		body     string
		status   int
		decision string
	}{
		{billing("req-4401", "sub_1", 10), 202, "accepted"},
		{billing("req-4401", "sub_1", 10), 200, "duplicate"},
		{billing("req-4402", "sub_1", 9), 200, "stale"},
		{billing("req-4401", "sub_1", 11), 422, "conflict"},
	} {
		status, body := c.post("billing", step.body)
		if status != step.status || body["decision"] != step.decision {
			t.Errorf("%s: %d %v, want %d %s", step.body, status, body, step.status, step.decision)
		}
	}
	waitFor(t, "forward", func() bool { return rec.count("req-4401") == 1 })
	if rec.count("req-4402") != 0 {
		t.Error("a stale update was forwarded")
	}
	waitFor(t, "empty outbox", func() bool { return len(c.items("/admin/outbox")) == 0 })
	status, r := c.adminCall(http.MethodGet, "/admin/receipts/billing/req-4401")
	if status != 200 || forwardState(r, "default") != "delivered" || r["attempts"] != 3.0 {
		t.Errorf("receipt = %d %v", status, r)
	}
	if status, _ := c.adminCall(http.MethodPost, "/admin/receipts/billing/req-4401/redeliver"); status != 202 {
		t.Errorf("redeliver: %d", status)
	}
	waitFor(t, "redelivery", func() bool { return rec.count("req-4401") == 2 })
	if status, body := c.adminCall(http.MethodPost, "/admin/receipts/billing/req-4402/redeliver"); status != 409 {
		t.Errorf("redeliver a stale request: %d %v, want 409", status, body)
	}
	if status, _ := c.adminCall(http.MethodPost, "/admin/deadletters/billing/default/req-4401/retry"); status != 404 {
		t.Errorf("retry of a request that is no dead letter: %d, want 404", status)
	}

	// A source without routes records decisions only.
	status, body := c.send(http.MethodPost, "http://"+c.public+"/hooks/audit", `{}`, map[string]string{"Idempotency-Key": "a-1"})
	if status != 202 || body["decision"] != "accepted" {
		t.Errorf("audit: %d %v", status, body)
	}
	if _, r := c.adminCall(http.MethodGet, "/admin/receipts/audit/a-1"); r["routes"] != nil || r["unrouted"] != nil {
		t.Errorf("audit receipt routes = %v, unrouted = %v; want neither", r["routes"], r["unrouted"])
	}

	// Everything survives a restart on the same data directory.
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, c = startMain(t, testConfig(t, dir, down.URL, "127.0.0.1:0", "127.0.0.1:0"))
	defer m.Close(context.Background())
	if status, body := c.post("billing", billing("req-4401", "sub_1", 10)); body["decision"] != "duplicate" {
		t.Errorf("after restart: %d %v, want duplicate", status, body)
	}
	if status, body := c.post("billing", billing("req-4403", "sub_1", 10)); body["decision"] != "stale" || body["latest_version"] != "10" {
		t.Errorf("after restart: %d %v, want stale against 10", status, body)
	}
}

func TestDeadLetterWorkflow(t *testing.T) {
	var fail sync.Mutex
	failing := true
	var got sync.Map
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail.Lock()
		defer fail.Unlock()
		if failing {
			http.Error(w, "nope", http.StatusBadRequest)
			return
		}
		got.Store(r.Header.Get("Idempotency-Key"), true)
	}))
	defer down.Close()
	m, c := startMain(t, testConfig(t, t.TempDir(), down.URL, "127.0.0.1:0", "127.0.0.1:0"))
	defer m.Close(context.Background())
	c.post("billing", billing("req-1", "sub_1", 1))
	c.post("billing", billing("req-2", "sub_2", 1))
	waitFor(t, "dead letters", func() bool { return len(c.items("/admin/deadletters?source=billing")) == 2 })
	dl := c.items("/admin/deadletters")[0].(map[string]any)
	for _, k := range []string{"request_id", "route", "resource", "version", "attempts", "last_status", "last_error", "dead_at"} {
		if _, ok := dl[k]; !ok {
			t.Errorf("dead letter lacks %s: %v", k, dl)
		}
	}
	if n := len(c.items("/admin/deadletters?source=audit")); n != 0 {
		t.Errorf("source filter: %d dead letters for audit", n)
	}
	fail.Lock()
	failing = false
	fail.Unlock()
	if status, _ := c.adminCall(http.MethodPost, "/admin/deadletters/billing/default/req-1/retry"); status != 202 {
		t.Fatalf("retry: %d", status)
	}
	if status, _ := c.adminCall(http.MethodDelete, "/admin/deadletters/billing/default/req-2"); status != 200 {
		t.Fatalf("discard: %d", status)
	}
	waitFor(t, "retried delivery", func() bool { _, ok := got.Load("req-1"); return ok })
	if _, r := c.adminCall(http.MethodGet, "/admin/receipts/billing/req-2"); forwardState(r, "default") != "discarded" {
		t.Errorf("discarded receipt says %v", r["routes"])
	}
	if n := len(c.items("/admin/deadletters")); n != 0 {
		t.Errorf("%d dead letters left", n)
	}
}

// Shutdown gives up on a close that hangs (a hung disk) a grace period
// after its deadline, and waits for one that ends within it.
func TestCloseWithinItsTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	hung := make(chan struct{})
	defer close(hung)
	returned := make(chan error, 1)
	go func() {
		returned <- closeWithin(ctx, 50*time.Millisecond, func(context.Context) error { <-hung; return nil })
	}()
	select {
	case err := <-returned:
		if err == nil || !strings.Contains(err.Error(), "shutdown_timeout") {
			t.Errorf("hung close: %v, want an error naming shutdown_timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closeWithin waited for a close that hangs")
	}
	slow := func(ctx context.Context) error { <-ctx.Done(); time.Sleep(20 * time.Millisecond); return nil }
	if err := closeWithin(ctx, time.Minute, slow); err != nil {
		t.Errorf("a close that ends within the grace: %v", err)
	}
}
