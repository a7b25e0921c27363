package sender_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/store"
)

var ctx = context.Background()

// arrival is one request the downstream received.
type arrival struct {
	body    string
	header  http.Header
	status  int
	at      time.Time
	version int
}

// downstream is a real HTTP server on loopback that records what it gets
// and answers with respond (200 when nil).
type downstream struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals []arrival
	respond  func(r *http.Request, n int) int // n counts requests from 1
	active   atomic.Int32                     // requests being answered now
}

func newDownstream(t *testing.T, respond func(r *http.Request, n int) int) *downstream {
	d := &downstream{respond: respond}
	d.Server = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.Close)
	return d
}

func (d *downstream) serve(w http.ResponseWriter, r *http.Request) {
	d.active.Add(1)
	defer d.active.Add(-1)
	body, _ := io.ReadAll(r.Body)
	d.mu.Lock()
	n := len(d.arrivals) + 1
	v, _ := strconv.Atoi(r.Header.Get("Webhook-Version"))
	d.arrivals = append(d.arrivals, arrival{body: string(body), header: r.Header.Clone(), at: time.Now(), version: v})
	d.mu.Unlock()
	status := http.StatusOK
	if d.respond != nil {
		status = d.respond(r, n)
	}
	d.mu.Lock()
	d.arrivals[n-1].status = status
	d.mu.Unlock()
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
}

// delivered returns the arrivals answered 2xx.
func (d *downstream) delivered() []arrival {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []arrival
	for _, a := range d.arrivals {
		if a.status >= 200 && a.status < 300 {
			out = append(out, a)
		}
	}
	return out
}

func (d *downstream) all() []arrival {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]arrival(nil), d.arrivals...)
}

// backend is what the forwarder's tests need of a store: the queue, and
// the decisions and admin calls that fill and read it.
type backend = storage.Backend

func pending(t testing.TB, q forward.Queue) map[forward.Target]int {
	t.Helper()
	n, err := q.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func openStore(t *testing.T, dir string) backend {
	t.Helper()
	s := store.New(dir)
	s.Logger = zaptest.NewLogger(t)
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// defaultRoute names the route of a source that has one, as the
// configuration does when it is not named.
const defaultRoute = "default"

// target is the one route of source.
func target(source string) forward.Target {
	return forward.Target{Source: source, Route: defaultRoute}
}

func route(url string) sender.Route {
	return sender.Route{
		URL:         url,
		Timeout:     2 * time.Second,
		Concurrency: 4,
		Policy:      forward.RetryPolicy{MaxAttempts: 5, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		PassHeaders: []string{"x-request-id"},
	}
}

func start(t *testing.T, s backend, routes map[forward.Target]sender.Route) *sender.Forwarder {
	t.Helper()
	f := sender.New(s, routes, zaptest.NewLogger(t))
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	return f
}

// accept decides a delivery of source's default route.
func accept(t *testing.T, s backend, source, requestID, resource string, version int) webhookd.Decision {
	t.Helper()
	return acceptTo(t, s, source, []string{defaultRoute}, requestID, resource, version)
}

// acceptTo decides a delivery that matched routes of source.
func acceptTo(t *testing.T, s backend, source string, routes []string, requestID, resource string, version int) webhookd.Decision {
	t.Helper()
	body := fmt.Sprintf(`{"id":%q,"object":%q,"version":%d}`, requestID, resource, version)
	d := webhookd.Delivery{
		Source: source, RequestID: requestID, DeliveryID: "dlv-" + requestID, ReceivedAt: time.Now(),
		Forward: true, Routes: routes, Body: []byte(body), ContentType: "application/json; charset=utf-8",
		Headers: map[string]string{"X-Request-Id": "trace-" + requestID},
	}
	if resource != "" {
		d.Resource, d.Version, d.VersionOrder = resource, strconv.Itoa(version), uint64(version)
	}
	return decide(t, s, d)
}

// decide fingerprints d's body and decides d.
func decide(t *testing.T, s backend, d webhookd.Delivery) webhookd.Decision {
	t.Helper()
	d.Fingerprint, _ = dedupe.Fingerprint(d.Body, nil)
	out, err := s.Decide(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	return out.Decision
}

// eventually waits for cond, failing after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func receipt(t *testing.T, s backend, source, requestID string) *dedupe.Receipt {
	t.Helper()
	r, err := s.Receipt(ctx, source, requestID)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// status returns the forward status of requestID of source on its
// default route; the zero status when it was not forwarded there.
func status(t *testing.T, s backend, source, requestID string) webhookd.ForwardStatus {
	t.Helper()
	return routeStatus(t, s, source, defaultRoute, requestID)
}

// routeStatus returns the forward status of requestID of source on route.
func routeStatus(t *testing.T, s backend, source, route, requestID string) webhookd.ForwardStatus {
	t.Helper()
	if rs := receipt(t, s, source, requestID).Route(route); rs != nil {
		return rs.ForwardStatus
	}
	return webhookd.ForwardStatus{}
}

// delivered reports whether billing's requestID is recorded as delivered.
func delivered(t *testing.T, s backend, requestID string) func() bool {
	return func() bool { return status(t, s, "billing", requestID).State == webhookd.ForwardDelivered }
}

func outboxEmpty(t *testing.T, s backend) func() bool {
	return func() bool {
		entries, _, err := s.Outbox(ctx, forward.Target{}, storage.Page{})
		if err != nil {
			t.Fatal(err)
		}
		return len(entries) == 0
	}
}

func TestForwardsExactBodyAndHeaders(t *testing.T) {
	s := openStore(t, t.TempDir())
	down := newDownstream(t, nil)
	r := route(down.URL + "/billing")
	r.Headers = map[string]string{"Authorization": "Bearer downstream-token"}
	start(t, s, map[forward.Target]sender.Route{target("billing"): r})
	accept(t, s, "billing", "req-1", "sub_1", 7)
	eventually(t, "delivery", func() bool { return len(down.delivered()) == 1 })
	a := down.delivered()[0]
	want := map[string]string{
		"Idempotency-Key":  "req-1",
		"Content-Type":     "application/json; charset=utf-8",
		"Webhook-Source":   "billing",
		"Webhook-Route":    "default",
		"Webhook-Resource": "sub_1",
		"Webhook-Version":  "7",
		"Webhook-Attempt":  "1",
		"Authorization":    "Bearer downstream-token",
		"X-Request-Id":     "trace-req-1",
		"User-Agent":       "webhookd",
	}
	for k, v := range want {
		if got := a.header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if a.body != `{"id":"req-1","object":"sub_1","version":7}` {
		t.Errorf("body = %q", a.body)
	}
	eventually(t, "receipt delivered", delivered(t, s, "req-1"))
	f := status(t, s, "billing", "req-1")
	if f.Attempts != 1 || f.LastStatus != 200 || f.DeliveredAt == nil {
		t.Errorf("forward status = %+v", f)
	}
	eventually(t, "empty outbox", outboxEmpty(t, s))
}

func TestDuplicatesAndStaleAreNeverForwarded(t *testing.T) {
	s := openStore(t, t.TempDir())
	down := newDownstream(t, nil)
	start(t, s, map[forward.Target]sender.Route{target("billing"): route(down.URL)})
	decisions := []webhookd.Decision{
		accept(t, s, "billing", "req-2", "sub_1", 2),
		accept(t, s, "billing", "req-2", "sub_1", 2),
		accept(t, s, "billing", "req-1", "sub_1", 1),
		accept(t, s, "billing", "req-2b", "sub_1", 2),
	}
	want := []webhookd.Decision{webhookd.Accepted, webhookd.Duplicate, webhookd.Stale, webhookd.Stale}
	for i := range want {
		if decisions[i] != want[i] {
			t.Fatalf("decision %d = %s, want %s", i, decisions[i], want[i])
		}
	}
	eventually(t, "empty outbox", outboxEmpty(t, s))
	all := down.all()
	if len(all) != 1 || all[0].header.Get("Idempotency-Key") != "req-2" {
		t.Errorf("downstream got %d requests, want only req-2", len(all))
	}
}

func TestFailsTwiceThenDelivered(t *testing.T) {
	s := openStore(t, t.TempDir())
	down := newDownstream(t, func(_ *http.Request, n int) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	start(t, s, map[forward.Target]sender.Route{target("billing"): route(down.URL)})
	accept(t, s, "billing", "req-1", "", 0)
	eventually(t, "receipt delivered", delivered(t, s, "req-1"))
	all := down.all()
	if len(all) != 3 {
		t.Fatalf("downstream got %d requests, want 3", len(all))
	}
	for i, a := range all {
		if a.header.Get("Idempotency-Key") != "req-1" || a.header.Get("Webhook-Attempt") != strconv.Itoa(i+1) {
			t.Errorf("request %d: key %q attempt %q", i, a.header.Get("Idempotency-Key"), a.header.Get("Webhook-Attempt"))
		}
	}
	if f := status(t, s, "billing", "req-1"); f.Attempts != 3 || f.LastStatus != 200 {
		t.Errorf("forward status = %+v, want delivered after 3 attempts", f)
	}
}

// settleFailsOnce is the store whose first Settle reports an error. It
// may have landed all the same, as when a Badger commit's sync fails after
// the write, or not, as when the disk is full.
type settleFailsOnce struct {
	backend
	lands  bool
	failed atomic.Bool
}

func (o *settleFailsOnce) Settle(ctx context.Context, e forward.Claim, r forward.Result) error {
	if !o.failed.CompareAndSwap(false, true) {
		return o.backend.Settle(ctx, e, r)
	}
	if o.lands {
		if err := o.backend.Settle(ctx, e, r); err != nil {
			return err
		}
	}
	return errors.New("sync memtable log: input/output error")
}

// After a Settle that failed, the forwarder settles the claim again: one
// that was recorded is not recorded twice, one that was not is recorded
// now, and neither is sent again.
func TestSettleThatFailedIsNotSentAgain(t *testing.T) {
	for _, lands := range []bool{true, false} {
		for _, supersede := range []bool{false, true} {
			t.Run(fmt.Sprintf("lands=%v/supersede=%v", lands, supersede), func(t *testing.T) {
				s := openStore(t, t.TempDir())
				down := newDownstream(t, nil)
				for v := 1; v <= 3; v++ {
					accept(t, s, "billing", fmt.Sprintf("req-%d", v), "sub_1", v)
				}
				r := route(down.URL)
				r.Supersede = supersede
				o := &settleFailsOnce{backend: s, lands: lands}
				f := sender.New(o, map[forward.Target]sender.Route{target("billing"): r}, zaptest.NewLogger(t))
				if err := f.Open(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close(ctx) })
				eventually(t, "a Settle that fails", o.failed.Load)
				// The lane waits a second after the error, then finishes.
				eventually(t, "nothing pending", func() bool { return pending(t, s)[target("billing")] == 0 })
				var keys []string
				for _, a := range down.all() {
					keys = append(keys, a.header.Get("Idempotency-Key"))
				}
				want := []string{"req-1", "req-2", "req-3"}
				if supersede {
					want = []string{"req-3"}
				}
				if !slices.Equal(keys, want) {
					t.Errorf("downstream got %v, want %v", keys, want)
				}
				if !outboxEmpty(t, s)() {
					t.Error("entries left in the outbox")
				}
				for v, want := range map[int]webhookd.ForwardState{1: webhookd.ForwardSuperseded, 2: webhookd.ForwardSuperseded, 3: webhookd.ForwardDelivered} {
					if !supersede {
						want = webhookd.ForwardDelivered
					}
					if got := status(t, s, "billing", fmt.Sprintf("req-%d", v)); got.State != want || got.Attempts > 1 {
						t.Errorf("req-%d: %+v, want %s", v, got, want)
					}
				}
			})
		}
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	s := openStore(t, t.TempDir())
	down := newDownstream(t, func(_ *http.Request, n int) int {
		if n == 1 {
			return http.StatusTooManyRequests // with Retry-After: 1
		}
		return http.StatusOK
	})
	r := route(down.URL) // backoff alone would retry after 10 ms
	r.Policy.Max = 5 * time.Second
	start(t, s, map[forward.Target]sender.Route{target("billing"): r})
	accept(t, s, "billing", "req-1", "", 0)
	eventually(t, "second attempt", func() bool { return len(down.all()) == 2 })
	all := down.all()
	if gap := all[1].at.Sub(all[0].at); gap < time.Second {
		t.Errorf("retried %v after a Retry-After of 1s", gap)
	}
}

func TestClientErrorDeadLettersAtOnce(t *testing.T) {
	s := openStore(t, t.TempDir())
	down := newDownstream(t, func(*http.Request, int) int { return http.StatusBadRequest })
	start(t, s, map[forward.Target]sender.Route{target("billing"): route(down.URL)})
	accept(t, s, "billing", "req-1", "sub_1", 1)
	eventually(t, "dead letter", func() bool { return status(t, s, "billing", "req-1").State == webhookd.ForwardDead })
	if n := len(down.all()); n != 1 {
		t.Errorf("a 400 was tried %d times, want 1", n)
	}
	dead, _, err := s.DeadLetters(ctx, forward.Target{Source: "billing"}, storage.Page{})
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters = %v, %v", dead, err)
	}
	if d := dead[0]; d.RequestID != "req-1" || d.LastStatus != 400 || d.Attempts != 1 || d.DeadAt == nil || d.LastError == "" {
		t.Errorf("dead letter = %+v", d)
	}
	eventually(t, "empty outbox", outboxEmpty(t, s))
	// A redelivery moves the forward status into the receipt it rewrites.
	if d := accept(t, s, "billing", "req-1", "sub_1", 1); d != webhookd.Duplicate {
		t.Fatalf("redelivery: %s, want duplicate", d)
	}
	if err := s.DiscardDeadLetter(ctx, target("billing"), "req-1"); err != nil {
		t.Fatal(err)
	}
	if f := status(t, s, "billing", "req-1"); f.State != webhookd.ForwardDiscarded || f.Attempts != 1 || f.LastStatus != 400 || f.LastError == "" {
		t.Errorf("after discard the receipt says %+v, want discarded with the attempt that failed", f)
	}
	if dead, _, _ := s.DeadLetters(ctx, forward.Target{}, storage.Page{}); len(dead) != 0 {
		t.Errorf("dead letters after discard: %d", len(dead))
	}
}

// A failed attempt's error quotes the start of the answer's body, bounded
// and on one line, in the retrying entry and in the dead letter.
func TestFailedAttemptsQuoteTheAnswer(t *testing.T) {
	long := strings.Repeat("x", 60<<10)
	for _, tc := range []struct {
		name, body, want string
	}{
		{"json", `{"error":"db down"}`, `downstream answered 503 Service Unavailable: {"error":"db down"}`},
		{"html", "<html>\n<body>\r\n\tdb\x07 down</body>\n</html>\n", `downstream answered 503 Service Unavailable: <html> <body> db\u0007 down</body> </html>`},
		{"long", long, "downstream answered 503 Service Unavailable: " + long[:256] + "…"},
		{"none", "", "downstream answered 503 Service Unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			answered := make(chan struct{}, 1)
			release := make(chan struct{})
			down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if r.Header.Get("Webhook-Attempt") == "2" {
					<-release // the entry is seen retrying first
				}
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, tc.body)
				select {
				case answered <- struct{}{}:
				default:
				}
			}))
			t.Cleanup(down.Close)
			t.Cleanup(func() { close(release) })
			r := route(down.URL)
			r.Policy.MaxAttempts = 2
			start(t, s, map[forward.Target]sender.Route{target("billing"): r})
			acceptRaw(t, s, "req-1", "application/json", "{}")
			<-answered
			eventually(t, "retrying", func() bool { return status(t, s, "billing", "req-1").Attempts == 1 })
			if f := status(t, s, "billing", "req-1"); f.State != webhookd.ForwardRetrying || f.LastError != tc.want {
				t.Errorf("retrying: forward status = %+v, want last_error %q", f, tc.want)
			}
			release <- struct{}{}
			eventually(t, "dead letter", func() bool { return status(t, s, "billing", "req-1").State == webhookd.ForwardDead })
			dead, _, err := s.DeadLetters(ctx, forward.Target{Source: "billing"}, storage.Page{})
			if err != nil || len(dead) != 1 {
				t.Fatalf("dead letters = %+v, %v", dead, err)
			}
			if want := tc.want + "; gave up after 2 attempts"; dead[0].LastError != want {
				t.Errorf("dead letter's last_error = %q, want %q", dead[0].LastError, want)
			}
		})
	}
}

// An entry may wait in its lane behind older versions' retries for longer
// than its payload lives. One sent with its body keeps in its dead letter
// the body it was sent with; one whose payload
// expired before it was claimed is handed out without its body, on every
// backend, and is dead-lettered as body lost without being sent.
func TestEntryOutlivingItsPayloadIsNotSent(t *testing.T) {
	s := store.New(t.TempDir())
	s.Logger = zaptest.NewLogger(t)
	s.ReceiptTTL = 2 * time.Second
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	down := newDownstream(t, func(*http.Request, int) int { return http.StatusServiceUnavailable })
	r := route(down.URL)
	// Retries take 0.8 s at most: within the TTL, as the configuration
	// check asks. Each version waits at least 0.4 s between its two
	// attempts, so the tenth is claimed at least 3.6 s after it was
	// accepted, past its payload's expiry (at most 3 s, as Badger keeps
	// expiry in whole seconds).
	r.Timeout, r.Policy = 200*time.Millisecond, forward.RetryPolicy{MaxAttempts: 2, Initial: 400 * time.Millisecond, Max: 400 * time.Millisecond}
	const versions = 10
	for v := 1; v <= versions; v++ {
		accept(t, s, "billing", fmt.Sprintf("req-%d", v), "sub_1", v)
	}
	start(t, s, map[forward.Target]sender.Route{target("billing"): r})
	eventually(t, "empty outbox", outboxEmpty(t, s))
	dead, _, err := s.DeadLetters(ctx, forward.Target{Source: "billing"}, storage.Page{})
	if err != nil || len(dead) != versions {
		t.Fatalf("dead letters = %+v, %v", dead, err)
	}
	lost := make(map[string]bool)
	for _, d := range dead {
		lost[d.RequestID] = d.BodyLost
	}
	if lost["req-1"] {
		t.Error("req-1: dead-lettered with body_lost, though it was sent within its payload's TTL")
	}
	if !lost["req-10"] {
		t.Error("req-10: dead-lettered with its body, though its payload expired before it was claimed")
	}
	for _, a := range down.all() {
		if a.version == versions {
			t.Errorf("req-10 was sent (%q) after its payload expired", a.body)
		}
		if a.body == "" {
			t.Errorf("version %d was sent without a body", a.version)
		}
	}
	if err := s.RetryDeadLetter(ctx, target("billing"), "req-10"); webhookd.ErrorCode(err) != webhookd.ECONFLICT || !strings.Contains(err.Error(), "expired") {
		t.Errorf("retry the newest, whose body was lost: %v, want a conflict saying its payload expired", err)
	}
}

func TestDownstreamDownPastMaxAttemptsThenRetried(t *testing.T) {
	s := openStore(t, t.TempDir())
	// A port with nothing listening: connections are refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r := route("http://" + addr + "/hook")
	r.Policy.MaxAttempts = 3
	start(t, s, map[forward.Target]sender.Route{target("billing"): r})
	accept(t, s, "billing", "req-1", "", 0)
	eventually(t, "dead letter", func() bool { return status(t, s, "billing", "req-1").State == webhookd.ForwardDead })
	if f := status(t, s, "billing", "req-1"); f.Attempts != 3 || f.LastError == "" {
		t.Errorf("forward status = %+v, want 3 attempts and the error", f)
	}

	// The downstream comes back on the same address.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s was taken meanwhile: %v", addr, err)
	}
	var got atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "req-1" {
			got.Add(1)
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	if err := s.RetryDeadLetter(ctx, target("billing"), "req-1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "delivered after retry", delivered(t, s, "req-1"))
	if got.Load() != 1 {
		t.Errorf("downstream got req-1 %d times, want 1", got.Load())
	}
	if f := status(t, s, "billing", "req-1"); f.Attempts != 1 {
		t.Errorf("attempts after retry = %d, want 1 (reset)", f.Attempts)
	}
}

func TestVersionsArriveInOrder(t *testing.T) {
	for _, supersede := range []bool{false, true} {
		t.Run(fmt.Sprintf("supersede=%v", supersede), func(t *testing.T) {
			s := openStore(t, t.TempDir())
			var up atomic.Bool
			down := newDownstream(t, func(*http.Request, int) int {
				if !up.Load() {
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			})
			r := route(down.URL)
			r.Supersede = supersede
			r.Policy.MaxAttempts = 1000
			start(t, s, map[forward.Target]sender.Route{target("billing"): r})
			for _, res := range []string{"sub_a", "sub_b"} {
				for v := 1; v <= 5; v++ {
					if d := accept(t, s, "billing", fmt.Sprintf("%s-v%d", res, v), res, v); d != webhookd.Accepted {
						t.Fatalf("v%d: %s", v, d)
					}
				}
			}
			time.Sleep(50 * time.Millisecond) // let the downstream refuse a few attempts
			up.Store(true)
			eventually(t, "empty outbox", outboxEmpty(t, s))
			last := map[string]int{}
			count := map[string]int{}
			for _, a := range down.delivered() {
				res := a.header.Get("Webhook-Resource")
				if a.version <= last[res] {
					t.Errorf("%s: version %d arrived after %d", res, a.version, last[res])
				}
				last[res] = a.version
				count[res]++
			}
			for _, res := range []string{"sub_a", "sub_b"} {
				want := 5
				if supersede {
					want = 1
				}
				if count[res] != want || last[res] != 5 {
					t.Errorf("%s: %d delivered, last v%d; want %d ending with v5", res, count[res], last[res], want)
				}
			}
			if supersede {
				for v := 1; v <= 4; v++ {
					if st := status(t, s, "billing", fmt.Sprintf("sub_a-v%d", v)).State; st != webhookd.ForwardSuperseded {
						t.Errorf("sub_a v%d: %s, want superseded", v, st)
					}
				}
			}
		})
	}
}

func TestPendingEntriesSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	for i := 1; i <= 3; i++ {
		accept(t, s, "billing", fmt.Sprint("req-", i), "sub_1", i)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	down := newDownstream(t, nil)
	start(t, s, map[forward.Target]sender.Route{target("billing"): route(down.URL)})
	eventually(t, "empty outbox", outboxEmpty(t, s))
	got := down.delivered()
	if len(got) != 3 {
		t.Fatalf("delivered %d, want 3", len(got))
	}
	for i, a := range got {
		if a.version != i+1 {
			t.Errorf("delivery %d is v%d", i, a.version)
		}
	}
}

func TestSlowDownstreamHoldsUpOnlyItsSource(t *testing.T) {
	s := openStore(t, t.TempDir())
	release := make(chan struct{})
	slow := newDownstream(t, func(*http.Request, int) int { <-release; return http.StatusOK })
	defer close(release)
	fast := newDownstream(t, nil)
	slowRoute := route(slow.URL)
	slowRoute.Concurrency = 1
	start(t, s, map[forward.Target]sender.Route{target("slow"): slowRoute, target("fast"): route(fast.URL)})
	for i := 0; i < 3; i++ {
		accept(t, s, "slow", fmt.Sprint("s-", i), "", 0)
	}
	for i := 0; i < 20; i++ {
		accept(t, s, "fast", fmt.Sprint("f-", i), "", 0)
	}
	eventually(t, "fast source delivered", func() bool { return len(fast.delivered()) == 20 })
}

func TestRedeliver(t *testing.T) {
	s := openStore(t, t.TempDir())
	down := newDownstream(t, nil)
	start(t, s, map[forward.Target]sender.Route{target("billing"): route(down.URL)})
	accept(t, s, "billing", "req-1", "sub_1", 1)
	accept(t, s, "billing", "req-0", "sub_1", 0) // stale
	eventually(t, "delivered", delivered(t, s, "req-1"))
	if err := s.Redeliver(ctx, "billing", "req-1", ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, "second delivery", func() bool { return len(down.delivered()) == 2 })
	for _, a := range down.delivered() {
		if a.header.Get("Idempotency-Key") != "req-1" || a.body != `{"id":"req-1","object":"sub_1","version":1}` {
			t.Errorf("redelivery = %q %q", a.header.Get("Idempotency-Key"), a.body)
		}
	}
	if err := s.Redeliver(ctx, "billing", "req-0", ""); webhookd.ErrorCode(err) != webhookd.ECONFLICT {
		t.Errorf("redeliver a stale request: %v, want conflict", err)
	}
	accept(t, s, "billing", "req-2", "sub_1", 2)
	eventually(t, "v2 delivered", delivered(t, s, "req-2"))
	if err := s.Redeliver(ctx, "billing", "req-1", ""); webhookd.ErrorCode(err) != webhookd.ECONFLICT {
		t.Errorf("redeliver v1 after v2: %v, want conflict", err)
	}
	if err := s.Redeliver(ctx, "billing", "nope", ""); webhookd.ErrorCode(err) != webhookd.ENOTFOUND {
		t.Errorf("redeliver unknown: %v, want not found", err)
	}
}

// Close must not wait out the forward timeout (a minute here) for a
// downstream that hangs: it closes the connection, and the entry stays.
func TestCloseAbandonsInFlightAndKeepsTheEntry(t *testing.T) {
	s := openStore(t, t.TempDir())
	hang := make(chan struct{})
	defer close(hang)
	gone := make(chan struct{})
	down := newDownstream(t, func(r *http.Request, _ int) int {
		select {
		case <-r.Context().Done(): // the client closed the connection
			close(gone)
		case <-hang:
		}
		return http.StatusOK
	})
	r := route(down.URL)
	r.Timeout = time.Minute
	f := sender.New(s, map[forward.Target]sender.Route{target("billing"): r}, zaptest.NewLogger(t))
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	accept(t, s, "billing", "req-1", "", 0)
	eventually(t, "request in flight", func() bool { return down.active.Load() == 1 })
	c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- f.Close(c) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the hanging request instead of abandoning it")
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the downstream's connection was not closed")
	}
	entries, _, _ := s.Outbox(ctx, forward.Target{}, storage.Page{})
	if len(entries) != 1 || entries[0].Attempts != 0 {
		t.Errorf("outbox after abandoned shutdown = %+v, want the entry untouched", entries)
	}
	if st := status(t, s, "billing", "req-1").State; st != webhookd.ForwardPending {
		t.Errorf("receipt says %s, want pending", st)
	}
}

func TestSignedForwarding(t *testing.T) {
	const secret = "whsec_c2lnbmVkLWZvcndhcmRpbmctc2VjcmV0LTEyMzQ="
	s := openStore(t, t.TempDir())
	down := newDownstream(t, nil)
	r := route(down.URL)
	r.SignSecret = secret
	start(t, s, map[forward.Target]sender.Route{target("billing"): r})
	accept(t, s, "billing", "req-1", "", 0)
	eventually(t, "delivery", func() bool { return len(down.delivered()) == 1 })
	a := down.delivered()[0]
	id, ts, sig := a.header.Get("webhook-id"), a.header.Get("webhook-timestamp"), a.header.Get("webhook-signature")
	if id != "req-1" {
		t.Errorf("webhook-id = %q, want the request ID", id)
	}
	if n, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(n, 0)).Abs() > time.Minute {
		t.Errorf("webhook-timestamp = %q, want now", ts)
	}
	// Checked with HMAC code written out here, as a downstream would.
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "." + a.body))
	if want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)); sig != want {
		t.Errorf("webhook-signature = %q, want %q", sig, want)
	}
}

// An entry that waits in the outbox past the receipt TTL has lost its
// payload: it is dead-lettered, never sent empty, and cannot be retried.
func TestEntryWhosePayloadExpiredIsDeadLettered(t *testing.T) {
	dir := t.TempDir()
	s := store.New(dir)
	s.Logger = zaptest.NewLogger(t)
	s.ReceiptTTL = time.Second
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	accept(t, s, "billing", "req-1", "", 0)
	// Reopen, so that the entry is read back from disk rather than handed
	// over in memory, after the payload has expired (Badger expires by the
	// second: two boundaries are certain).
	s.Close()
	time.Sleep(2100 * time.Millisecond)
	b := openStore(t, dir)
	down := newDownstream(t, nil)
	start(t, b, map[forward.Target]sender.Route{target("billing"): route(down.URL)})
	eventually(t, "empty outbox", outboxEmpty(t, b))
	if n := len(down.all()); n != 0 {
		t.Errorf("the downstream got %d requests for an entry without a payload", n)
	}
	dead, _, err := b.DeadLetters(ctx, forward.Target{Source: "billing"}, storage.Page{})
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters = %v, %v", dead, err)
	}
	if d := dead[0]; !d.BodyLost || !strings.Contains(d.LastError, "payload expired") {
		t.Errorf("dead letter = %+v, want its body lost and why", d)
	}
	if err := b.RetryDeadLetter(ctx, target("billing"), "req-1"); webhookd.ErrorCode(err) != webhookd.ECONFLICT {
		t.Errorf("retrying a dead letter without a payload: %v, want a conflict", err)
	}
}

// TestAttemptLogLines checks the lines an operator follows a forward by: one
// per retry at info and the dead letter at warn, each naming the request
// and the attempt, and nothing for a delivery above debug.
func TestAttemptLogLines(t *testing.T) {
	s := openStore(t, t.TempDir())
	down := newDownstream(t, func(r *http.Request, _ int) int {
		if r.Header.Get("Idempotency-Key") == "req-ok" {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	r := route(down.URL)
	r.Policy.MaxAttempts = 2
	core, logs := observer.New(zapcore.InfoLevel)
	f := sender.New(s, map[forward.Target]sender.Route{target("billing"): r}, zap.New(core))
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	accept(t, s, "billing", "req-ok", "sub_1", 1)
	accept(t, s, "billing", "req-1", "sub_2", 4)
	eventually(t, "dead letter", func() bool { return status(t, s, "billing", "req-1").State == webhookd.ForwardDead })
	eventually(t, "delivery", delivered(t, s, "req-ok"))
	var got []string
	for _, e := range logs.All() {
		fields := e.ContextMap()
		if fields["source"] != "billing" || fields["request_id"] != "req-1" || fields["resource"] != "sub_2" ||
			fields["version"] != "4" || fields["status"] != int64(503) || fields["error"] == nil {
			t.Errorf("%s %q: fields %v", e.Level, e.Message, fields)
		}
		got = append(got, fmt.Sprintf("%s %s attempt %d", e.Level, e.Message, fields["attempt"]))
	}
	want := []string{"info forward failed, will retry attempt 1", "warn forward dead-lettered attempt 2"}
	if !slices.Equal(got, want) {
		t.Errorf("log lines %q, want %q", got, want)
	}
}

// A route removed from the configuration still has entries: they are
// dead-lettered, not left in the outbox nor sent anywhere, whether its
// source is gone or keeps other routes, which go on forwarding.
func TestEntriesOfARouteNotConfiguredAreDeadLettered(t *testing.T) {
	s := openStore(t, t.TempDir())
	accept(t, s, "retired", "req-1", "sub_1", 1)
	accept(t, s, "retired", "req-2", "sub_1", 2)
	acceptTo(t, s, "billing", []string{defaultRoute, "old"}, "req-3", "sub_1", 1)
	down := newDownstream(t, nil)
	start(t, s, map[forward.Target]sender.Route{target("billing"): route(down.URL)})
	eventually(t, "empty outbox", outboxEmpty(t, s))
	for _, tc := range []struct {
		target forward.Target
		dead   int
		error  string
	}{
		{target("retired"), 2, `source "retired" has no route "default" in the configuration`},
		{forward.Target{Source: "billing", Route: "old"}, 1, `source "billing" has no route "old" in the configuration`},
		{target("billing"), 0, ""},
	} {
		dead, _, err := s.DeadLetters(ctx, tc.target, storage.Page{})
		if err != nil || len(dead) != tc.dead {
			t.Fatalf("%s: dead letters = %+v, %v; want %d", tc.target, dead, err, tc.dead)
		}
		for _, d := range dead {
			if d.Route != tc.target.Route || !strings.Contains(d.LastError, tc.error) || d.BodyLost {
				t.Errorf("%s: dead letter %+v", tc.target, d)
			}
		}
	}
	if all := down.all(); len(all) != 1 || all[0].header.Get("Idempotency-Key") != "req-3" || all[0].header.Get("Webhook-Route") != defaultRoute {
		t.Errorf("downstream got %+v, want only req-3 on the default route", all)
	}
	if st := status(t, s, "billing", "req-3").State; st != webhookd.ForwardDelivered {
		t.Errorf("req-3 on the default route: %s, want delivered", st)
	}
}

// targets records the target of every attempt.
type targets struct {
	mu  sync.Mutex
	got map[forward.Target]int
}

func (m *targets) Attempted(t forward.Target, _ string, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got[t]++
}

func (m *targets) count(t forward.Target) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.got[t]
}

// A delivery that matched two routes of a source reaches each route's
// downstream once, named by Webhook-Route, with the same Idempotency-Key
// and body, each route's static headers, and only the passed-through
// headers its own pass_headers names, though the entry holds both routes'.
func TestEachRouteGetsItsOwnRequest(t *testing.T) {
	s := openStore(t, t.TempDir())
	ledger, audit := newDownstream(t, nil), newDownstream(t, nil)
	lr := route(ledger.URL)
	lr.Headers = map[string]string{"Authorization": "Bearer ledger"}
	ar := route(audit.URL)
	ar.Headers = map[string]string{"Authorization": "Bearer audit"}
	ar.PassHeaders = []string{"X-Trace"}
	lt, at := forward.Target{Source: "billing", Route: "ledger"}, forward.Target{Source: "billing", Route: "audit"}
	f := sender.New(s, map[forward.Target]sender.Route{lt: lr, at: ar}, zaptest.NewLogger(t))
	m := &targets{got: map[forward.Target]int{}}
	f.Metrics = m
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	decide(t, s, webhookd.Delivery{
		Source: "billing", RequestID: "req-1", ReceivedAt: time.Now(),
		Forward: true, Routes: []string{"ledger", "audit"}, Body: []byte(`{"id":"req-1"}`), ContentType: "application/json",
		Headers: map[string]string{"X-Request-Id": "trace-req-1", "X-Trace": "t-1"},
	})
	eventually(t, "both routes delivered", func() bool {
		return routeStatus(t, s, "billing", "ledger", "req-1").State == webhookd.ForwardDelivered &&
			routeStatus(t, s, "billing", "audit", "req-1").State == webhookd.ForwardDelivered
	})
	for _, tc := range []struct {
		down                       *downstream
		route, auth, reqID, xTrace string
	}{
		{ledger, "ledger", "Bearer ledger", "trace-req-1", ""},
		{audit, "audit", "Bearer audit", "", "t-1"},
	} {
		all := tc.down.all()
		if len(all) != 1 {
			t.Fatalf("%s got %d requests, want 1", tc.route, len(all))
		}
		h := all[0].header
		for k, want := range map[string]string{"Webhook-Route": tc.route, "Webhook-Source": "billing", "Idempotency-Key": "req-1",
			"Authorization": tc.auth, "X-Request-Id": tc.reqID, "X-Trace": tc.xTrace} {
			if got := h.Get(k); got != want {
				t.Errorf("%s: header %s = %q, want %q", tc.route, k, got, want)
			}
		}
		if all[0].body != `{"id":"req-1"}` {
			t.Errorf("%s: body %q", tc.route, all[0].body)
		}
	}
	if m.count(lt) != 1 || m.count(at) != 1 {
		t.Errorf("attempts counted %v, want one for each route", m.got)
	}
}

// A route whose downstream fails, or hangs, holds up nothing of another
// route of the same source: the other gets every delivery, each
// resource's versions in order, while the failing route's entries wait
// in its own lanes, neither delivered nor dead-lettered.
func TestFailingRouteHoldsUpNoOtherRoute(t *testing.T) {
	for _, failure := range []string{"503", "hang"} {
		t.Run(failure, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			hang := make(chan struct{})
			bad := newDownstream(t, func(*http.Request, int) int {
				if failure == "hang" {
					<-hang
				}
				return http.StatusServiceUnavailable
			})
			good := newDownstream(t, nil)
			br := route(bad.URL)
			br.Timeout, br.Policy.MaxAttempts = time.Minute, 1000
			start(t, s, map[forward.Target]sender.Route{
				{Source: "billing", Route: "audit"}:  br,
				{Source: "billing", Route: "ledger"}: route(good.URL),
			})
			t.Cleanup(func() { close(hang) }) // before the forwarder closes
			const resources, versions = 4, 10
			for v := 1; v <= versions; v++ {
				for r := range resources {
					id := fmt.Sprintf("sub_%d-v%d", r, v)
					if d := acceptTo(t, s, "billing", []string{"audit", "ledger"}, id, fmt.Sprintf("sub_%d", r), v); d != webhookd.Accepted {
						t.Fatalf("%s: %s", id, d)
					}
				}
			}
			// The downstream sees a request before its result is settled.
			eventually(t, "the good route delivered and settled everything", func() bool {
				return len(good.delivered()) == resources*versions && pending(t, s)[forward.Target{Source: "billing", Route: "ledger"}] == 0
			})
			last := map[string]int{}
			for _, a := range good.delivered() {
				res := a.header.Get("Webhook-Resource")
				if a.version != last[res]+1 {
					t.Errorf("%s: version %d arrived after %d", res, a.version, last[res])
				}
				last[res] = a.version
			}
			if n := len(bad.delivered()); n != 0 {
				t.Errorf("the failing route delivered %d", n)
			}
			if p := pending(t, s)[forward.Target{Source: "billing", Route: "audit"}]; p != resources*versions {
				t.Errorf("the failing route has %d pending, want %d", p, resources*versions)
			}
			dead, _, err := s.DeadLetters(ctx, forward.Target{Source: "billing"}, storage.Page{})
			if err != nil || len(dead) != 0 {
				t.Errorf("dead letters = %+v, %v; want none", dead, err)
			}
			for r := range resources {
				id := fmt.Sprintf("sub_%d-v%d", r, versions)
				if st := routeStatus(t, s, "billing", "ledger", id).State; st != webhookd.ForwardDelivered {
					t.Errorf("%s on ledger: %s, want delivered", id, st)
				}
				if st := routeStatus(t, s, "billing", "audit", id).State; st != webhookd.ForwardPending {
					t.Errorf("%s on audit: %s, want pending behind its lane's head", id, st)
				}
			}
		})
	}
}
