package sender_test

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
)

// startPolling starts a forwarder that polls every interval.
func startPolling(t *testing.T, s backend, routes map[forward.Target]sender.Route, interval time.Duration) *sender.Forwarder {
	t.Helper()
	f := sender.New(s, routes, zaptest.NewLogger(t))
	f.PollInterval = interval
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	return f
}

// acceptMany accepts n deliveries to source's default route, 32 at a
// time: request IDs req-0 to req-n-1, without a resource, so that each is
// a lane of its own.
func acceptMany(t *testing.T, s backend, source string, n int) {
	t.Helper()
	next := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range next {
				d := webhookd.Delivery{
					Source: source, RequestID: fmt.Sprint("req-", i), ReceivedAt: time.Now(),
					Forward: true, Routes: []string{defaultRoute}, Body: fmt.Appendf(nil, `{"id":"req-%d"}`, i), ContentType: "application/json",
				}
				d.Fingerprint = d.RequestID
				if _, err := s.Decide(ctx, d); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// busiestSecond returns the most of times that fall in any one second:
// times[i] to the last before times[i] + 1 s, for every i.
func busiestSecond(times []time.Time) int {
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range times {
		for j < len(times) && times[j].Sub(times[i]) < time.Second {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// A route with rate 200/s (and the burst its configuration gives it by
// default, 20) drains a backlog of 5,000 entries with no more than the
// rate plus the burst in any second at the downstream. The tolerance is
// a quarter of a second's worth of the rate (50): a request is counted
// when it reaches the downstream, which lags the grant of its send by
// however long the loaded machine takes to get it there, so one second at
// the downstream may hold the sends of a little more than one second.
// Without the limit, the forwarder sends thousands a second.
func TestRateLimitHoldsUnderABacklog(t *testing.T) {
	const (
		backlog   = 5000
		limit     = 200
		burst     = 20
		tolerance = limit / 4
	)
	s := openStore(t, t.TempDir())
	acceptMany(t, s, "billing", backlog)
	var mu sync.Mutex
	var arrivals []time.Time
	down := newDownstream(t, func(*http.Request, int) int {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		return http.StatusOK
	})
	r := route(down.URL)
	r.Concurrency = 32
	r.Rate = forward.Rate{Limit: limit, Burst: burst}
	start(t, s, map[forward.Target]sender.Route{target("billing"): r})
	deadline := time.Now().Add(4 * backlog / limit * time.Second)
	for pending(t, s)[target("billing")] > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries left after four times the time the rate takes", pending(t, s)[target("billing")])
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != backlog {
		t.Fatalf("downstream got %d requests, want %d", len(arrivals), backlog)
	}
	took := arrivals[len(arrivals)-1].Sub(arrivals[0])
	most := busiestSecond(arrivals)
	t.Logf("%d requests in %s (%.0f/s); the busiest second had %d", backlog, took.Round(time.Millisecond), float64(backlog)/took.Seconds(), most)
	if most > limit+burst+tolerance {
		t.Errorf("the downstream got %d requests in one second, over the rate %d plus the burst %d (tolerance %d)", most, limit, burst, tolerance)
	}
}

// A downstream down for longer than max_attempts × backoff would last:
// the breaker opens, no entry is dead-lettered, and while the route is
// open the downstream sees only probes, at most one per cool-down; once
// it recovers the backlog is delivered, each resource's versions in
// order.
func TestBreakerHoldsEntriesThroughAnOutage(t *testing.T) {
	const (
		failures    = 2
		concurrency = 4
		cooldown    = 100 * time.Millisecond
		probes      = 5 // the outage lasts this many probes: 100+200+400+400+400 ms, far past 3 attempts × 50 ms
	)
	s := openStore(t, t.TempDir())
	var up atomic.Bool
	var mu sync.Mutex
	type seen struct {
		at      time.Time
		circuit forward.Circuit
	}
	var outage []seen // the requests that arrived while the downstream was down
	down := newDownstream(t, func(*http.Request, int) int {
		if up.Load() {
			return http.StatusOK
		}
		// The route's state as the request arrives tells a probe (half-open)
		// from a request sent before the breaker opened.
		states, err := s.RouteStates(ctx)
		if err != nil {
			t.Error(err)
		}
		c := states[target("billing")].Circuit
		mu.Lock()
		outage = append(outage, seen{time.Now(), c})
		mu.Unlock()
		return http.StatusServiceUnavailable
	})
	r := route(down.URL)
	r.Concurrency = concurrency
	r.Policy = forward.RetryPolicy{MaxAttempts: 3, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	r.Breaker = forward.Breaker{Failures: failures, Cooldown: cooldown, MaxCooldown: 4 * cooldown}
	var ids []string
	for v := 1; v <= 4; v++ {
		for _, res := range []string{"sub_a", "sub_b", "sub_c", "sub_d", "sub_e"} {
			id := fmt.Sprintf("%s-v%d", res, v)
			accept(t, s, "billing", id, res, v)
			ids = append(ids, id)
		}
	}
	start(t, s, map[forward.Target]sender.Route{target("billing"): r})
	eventually(t, "probes while the downstream is down", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range outage {
			if a.circuit == forward.HalfOpen {
				n++
			}
		}
		return n >= probes
	})
	up.Store(true)
	eventually(t, "empty outbox", outboxEmpty(t, s))

	mu.Lock()
	defer mu.Unlock()
	// Before the breaker opened: at most failures reports while closed,
	// and what was in flight when it opened.
	var before, inFlight int
	var probeTimes []time.Time
	for _, a := range outage {
		switch a.circuit {
		case forward.HalfOpen:
			probeTimes = append(probeTimes, a.at)
		case forward.Open:
			inFlight++
			if len(probeTimes) > 0 {
				t.Errorf("a request that was no probe arrived while the route was open, after %d probes", len(probeTimes))
			}
		default:
			before++
			if len(probeTimes) > 0 {
				t.Errorf("a request arrived while the route was closed during the outage, after %d probes", len(probeTimes))
			}
		}
	}
	if before+inFlight > failures+concurrency-1 {
		t.Errorf("%d requests before the breaker opened and %d in flight when it did, want at most %d", before, inFlight, failures+concurrency-1)
	}
	for i := 1; i < len(probeTimes); i++ {
		if gap := probeTimes[i].Sub(probeTimes[i-1]); gap < cooldown {
			t.Errorf("probe %d came %s after the one before, within the cool-down %s", i+1, gap, cooldown)
		}
	}
	t.Logf("during the outage: %d requests before the breaker opened, %d in flight, %d probes", before, inFlight, len(probeTimes))

	dead, err := s.DeadLetterCounts()
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 0 {
		t.Errorf("dead letters %v, want none: the outage is no fault of the entries", dead)
	}
	last := map[string]int{}
	var got []string
	for _, a := range down.delivered() {
		res := a.header.Get("Webhook-Resource")
		if a.version <= last[res] {
			t.Errorf("%s: version %d arrived after %d", res, a.version, last[res])
		}
		last[res] = a.version
		got = append(got, a.header.Get("Idempotency-Key"))
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Errorf("delivered %v, want each of %v once", got, ids)
	}
	for _, id := range ids {
		if f := status(t, s, "billing", id); f.State != webhookd.ForwardDelivered || f.Attempts > r.Policy.MaxAttempts {
			t.Errorf("%s: %+v, want delivered within max_attempts", id, f)
		}
	}
	states, err := s.RouteStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := states[target("billing")]; st.Circuit == forward.Open || st.Circuit == forward.HalfOpen {
		t.Errorf("after recovery the route is %s", st.Circuit)
	}
}

// A paused route sends nothing while the other routes of its source
// deliver; resumed, it drains its backlog in per-resource order.
func TestPauseHoldsAndResumeDrainsInOrder(t *testing.T) {
	s := openStore(t, t.TempDir())
	ledgerDown, auditDown := newDownstream(t, nil), newDownstream(t, nil)
	ledger := forward.Target{Source: "billing", Route: "ledger"}
	audit := forward.Target{Source: "billing", Route: "audit"}
	if err := s.Pause(ctx, ledger, true); err != nil {
		t.Fatal(err)
	}
	const resources, versions = 4, 5
	for v := 1; v <= versions; v++ {
		for i := range resources {
			acceptTo(t, s, "billing", []string{"ledger", "audit"}, fmt.Sprintf("sub_%d-v%d", i, v), fmt.Sprint("sub_", i), v)
		}
	}
	startPolling(t, s, map[forward.Target]sender.Route{ledger: route(ledgerDown.URL), audit: route(auditDown.URL)}, 20*time.Millisecond)
	eventually(t, "audit's deliveries", func() bool { return len(auditDown.delivered()) == resources*versions })
	time.Sleep(100 * time.Millisecond) // five polls pass
	if n := len(ledgerDown.all()); n != 0 {
		t.Fatalf("the paused route sent %d requests", n)
	}
	if n := pending(t, s)[ledger]; n != resources*versions {
		t.Fatalf("the paused route has %d entries pending, want %d", n, resources*versions)
	}

	if err := s.Pause(ctx, ledger, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ledger's backlog drained", func() bool { return pending(t, s)[ledger] == 0 })
	last := map[string]int{}
	for _, a := range ledgerDown.delivered() {
		res := a.header.Get("Webhook-Resource")
		if a.version != last[res]+1 {
			t.Errorf("%s: version %d arrived after %d", res, a.version, last[res])
		}
		last[res] = a.version
	}
	if n := len(ledgerDown.delivered()); n != resources*versions {
		t.Errorf("ledger got %d, want %d", n, resources*versions)
	}
}

// A success ends a run of failures: a downstream failing two requests in
// three never fails three in a row, so a breaker that opens on three never
// opens, though most attempts fail.
func TestSuccessesEndARunOfFailures(t *testing.T) {
	s := openStore(t, t.TempDir())
	down := newDownstream(t, func(_ *http.Request, n int) int {
		if n%3 == 0 {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	r := route(down.URL)
	r.Concurrency = 1 // the downstream's answers come in the order of the reports
	r.Policy = forward.RetryPolicy{MaxAttempts: 10, Initial: time.Millisecond, Max: time.Millisecond}
	r.Breaker = forward.Breaker{Failures: 3, Cooldown: time.Hour, MaxCooldown: time.Hour}
	const entries = 10
	for i := range entries {
		accept(t, s, "billing", fmt.Sprint("req-", i), "", 0)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	f := sender.New(s, map[forward.Target]sender.Route{target("billing"): r}, zap.New(core))
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	eventually(t, "every entry delivered", func() bool { return len(down.delivered()) == entries })
	if n := logs.FilterMessageSnippet("circuit breaker is open").Len(); n != 0 {
		t.Errorf("the breaker opened %d times, though no three failures came in a row", n)
	}
	if n := len(down.all()); n != 3*entries {
		t.Errorf("downstream got %d requests, want %d", n, 3*entries)
	}
}
