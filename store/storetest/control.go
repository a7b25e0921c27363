package storetest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookd/webhookd/forward"
)

// grant asks for n sends on tg for owner and checks what it gets.
func (f *fixture) grant(owner string, tg forward.Target, n int, r forward.Rate, lease time.Duration, want int, wantProbe bool) {
	f.t.Helper()
	g, probe, err := f.b.Grant(ctx, owner, tg, n, r, lease)
	if err != nil || g != want || probe != wantProbe {
		f.t.Fatalf("%s asks %d on %s: granted %d (probe %v), %v; want %d (probe %v)", owner, n, tg, g, probe, err, want, wantProbe)
	}
}

// report reports one attempt on tg and checks whether it counted and
// where the breaker stands after it.
func (f *fixture) report(tg forward.Target, up bool, b forward.Breaker, counted bool, circuit forward.Circuit) forward.RouteState {
	f.t.Helper()
	st, c, err := f.b.Report(ctx, tg, up, b)
	if err != nil || c != counted || circuitOf(st) != circuit {
		f.t.Fatalf("report up=%v on %s: counted %v, state %+v, %v; want counted %v, %s", up, tg, c, st, err, counted, circuit)
	}
	return st
}

// testRateSharedByOwners checks that the owners granting sends on a route
// share one rate budget, which refills by the backend's clock, takes back
// what a grant left unused, and is the route's own.
func testRateSharedByOwners(t *testing.T, open Open) {
	f := newFixture(t, open)
	r := forward.Rate{Limit: 10, Burst: 5}
	f.grant("a", target, 4, r, time.Minute, 4, false)
	f.grant("b", target, 4, r, time.Minute, 1, false) // what a left
	f.grant("a", target, 1, r, time.Minute, 0, false)
	other := forward.Target{Source: source, Route: "other"}
	f.grant("b", other, 8, r, time.Minute, 5, false) // another route has its own budget
	f.clock.Advance(200 * time.Millisecond)
	f.grant("b", target, 8, r, time.Minute, 2, false)
	f.clock.Advance(time.Hour)
	f.grant("a", target, 8, r, time.Minute, 5, false) // never more than the burst
	if err := f.b.Release(ctx, "a", target, 3, false, r); err != nil {
		t.Fatal(err)
	}
	f.grant("b", target, 8, r, time.Minute, 3, false)
	f.grant("b", target, 8, forward.Rate{}, time.Minute, 8, false) // no rate, no bound

	// Concurrent grants take each token once.
	burst := forward.Rate{Limit: 1, Burst: 50}
	shared := forward.Target{Source: source, Route: "shared"}
	var granted atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			for range 5 {
				g, _, err := f.b.Grant(ctx, string(rune('a'+i)), shared, 1, burst, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				granted.Add(int32(g))
			}
		})
	}
	wg.Wait()
	if granted.Load() != 50 {
		t.Errorf("100 concurrent grants of one took %d tokens of a bucket of 50", granted.Load())
	}
}

// testBreakerSharedByOwners checks the breaker through the backend: it
// opens after a run of failures, which then no longer count; after the
// cool-down one owner probes while the others get nothing; a probe
// whose lease ends, or that is released unused, lets another probe; a
// success closes it.
func testBreakerSharedByOwners(t *testing.T, open Open) {
	f := newFixture(t, open)
	b := forward.Breaker{Failures: 3, Cooldown: 10 * time.Second, MaxCooldown: time.Minute}
	lease := 30 * time.Second
	f.grant("a", target, 8, forward.Rate{}, lease, 8, false)
	f.report(target, false, b, true, forward.Closed)
	f.report(target, false, b, true, forward.Closed)
	st := f.report(target, false, b, false, forward.Open)
	if !st.OpenUntil.Equal(f.clock.Now().Add(10 * time.Second)) {
		t.Errorf("open until %v, want the cool-down after now (%v)", st.OpenUntil, f.clock.Now())
	}
	f.report(target, false, b, false, forward.Open) // in flight when it opened
	f.grant("a", target, 8, forward.Rate{}, lease, 0, false)
	f.grant("b", target, 8, forward.Rate{}, lease, 0, false)

	f.clock.Advance(10 * time.Second)
	f.grant("a", target, 8, forward.Rate{}, lease, 1, true)
	f.grant("b", target, 8, forward.Rate{}, lease, 0, false) // a's probe is out
	st = f.report(target, false, b, false, forward.Open)     // it failed: twice the cool-down
	if !st.OpenUntil.Equal(f.clock.Now().Add(20 * time.Second)) {
		t.Errorf("after a failed probe, open until %v, want 20 s after now (%v)", st.OpenUntil, f.clock.Now())
	}
	f.clock.Advance(20 * time.Second)
	f.grant("b", target, 8, forward.Rate{}, lease, 1, true)
	f.clock.Advance(lease - time.Second)
	f.grant("a", target, 8, forward.Rate{}, lease, 0, false)
	f.clock.Advance(time.Second) // b died with its probe
	f.grant("a", target, 8, forward.Rate{}, lease, 1, true)
	if err := f.b.Release(ctx, "a", target, 1, true, forward.Rate{}); err != nil {
		t.Fatal(err)
	}
	f.grant("b", target, 8, forward.Rate{}, lease, 1, true) // a found nothing to send
	f.report(target, true, b, true, forward.Closed)
	f.grant("a", target, 8, forward.Rate{}, lease, 8, false)
	st = f.report(target, false, b, true, forward.Closed)
	if st.Failures != 1 || st.Opens != 0 {
		t.Errorf("after closing, one failure: %+v", st)
	}

	states, err := f.b.RouteStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := states[target]; circuitOf(got) != forward.Closed || got.Failures != 1 || got.Paused {
		t.Errorf("route state %+v, want closed after one failure", got)
	}
	other := forward.Target{Source: source, Route: "other"}
	f.grant("a", other, 8, forward.Rate{}, lease, 8, false) // another route's breaker is its own
	f.report(other, false, forward.Breaker{}, true, forward.Closed)
}

// testPausePersists checks that a paused route grants nothing, stays
// paused across a reopen, is listed as paused, and sends again once
// resumed; its entries wait meanwhile.
func testPausePersists(t *testing.T, open Open) {
	f := newFixture(t, open)
	other := forward.Target{Source: source, Route: "other"}
	if err := f.b.Pause(ctx, target, true); err != nil {
		t.Fatal(err)
	}
	f.accept("waits", "", 0)
	f.grant("a", target, 8, forward.Rate{}, time.Minute, 0, false)
	f.grant("a", other, 8, forward.Rate{}, time.Minute, 8, false)
	f.reopen()
	f.grant("a", target, 8, forward.Rate{}, time.Minute, 0, false)
	states, err := f.b.RouteStates(ctx)
	if err != nil || !states[target].Paused || states[other].Paused {
		t.Fatalf("route states after reopening %+v, %v; want %s paused, %s not", states, err, target, other)
	}
	if entries, err := f.outbox(target); err != nil || len(entries) != 1 {
		t.Errorf("outbox of the paused route %+v, %v; want its entry", entries, err)
	}
	if err := f.b.Pause(ctx, target, false); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	f.grant("a", target, 8, forward.Rate{}, time.Minute, 8, false)
	if states, err := f.b.RouteStates(ctx); err != nil || states[target].Paused {
		t.Errorf("route states after resuming and reopening %+v, %v", states, err)
	}
}

// circuitOf is where st's breaker stands: a zero state's is closed.
func circuitOf(st forward.RouteState) forward.Circuit {
	if st.Circuit == "" {
		return forward.Closed
	}
	return st.Circuit
}
