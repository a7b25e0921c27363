package postgres

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/store/storetest"
)

// TestReplicasShareOneRateBudget grants sends on two replicas at once:
// between them they get the bucket's burst and what the rate refills,
// not one budget each.
func TestReplicasShareOneRateBudget(t *testing.T) {
	clock := storetest.NewClock()
	dir := t.TempDir()
	stores := []*Store{openTest(t, storetest.Config{Dir: dir, Now: clock.Now}), openTest(t, storetest.Config{Dir: dir, Now: clock.Now})}
	rate := forward.Rate{Limit: 20, Burst: 10}
	grantAll := func() int {
		var total atomic.Int32
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Go(func() {
				g, probe, err := stores[i%2].Grant(ctx, "w", target, 3, rate, time.Minute)
				if err != nil || probe {
					t.Errorf("grant: %v (probe %v)", err, probe)
				}
				total.Add(int32(g))
			})
		}
		wg.Wait()
		return int(total.Load())
	}
	if got := grantAll(); got != 10 {
		t.Errorf("a full bucket granted %d sends, want the burst of 10", got)
	}
	clock.Advance(200 * time.Millisecond)
	if got := grantAll(); got != 4 {
		t.Errorf("0.2 s at 20/s granted %d sends, want 4", got)
	}
	if err := stores[0].Release(ctx, "w", target, 3, false, rate); err != nil {
		t.Fatal(err)
	}
	if got := grantAll(); got != 3 {
		t.Errorf("after 3 released, granted %d sends, want 3", got)
	}
	other := forward.Target{Source: target.Source, Route: "other"}
	if g, _, err := stores[1].Grant(ctx, "w", other, 100, rate, time.Minute); err != nil || g != 10 {
		t.Errorf("another route: granted %d, %v; want its own burst of 10", g, err)
	}
}

// TestOneProbeAcrossReplicas opens a route's breaker on one replica: after
// the cool-down, of every grant on two replicas at once, one is the probe;
// the probe's success closes the route for both.
func TestOneProbeAcrossReplicas(t *testing.T) {
	clock := storetest.NewClock()
	dir := t.TempDir()
	a := openTest(t, storetest.Config{Dir: dir, Now: clock.Now})
	b := openTest(t, storetest.Config{Dir: dir, Now: clock.Now})
	breaker := forward.Breaker{Failures: 3, Cooldown: 10 * time.Second, MaxCooldown: time.Minute}
	for i := range 3 {
		st, counted, err := a.Report(ctx, target, false, breaker)
		if err != nil {
			t.Fatal(err)
		}
		if opens := i == 2; counted == opens || (st.Circuit == forward.Open) != opens {
			t.Fatalf("failure %d: %+v, counted %v", i+1, st, counted)
		}
	}
	if g, _, err := b.Grant(ctx, "b", target, 5, forward.Rate{}, time.Minute); err != nil || g != 0 {
		t.Errorf("open on the other replica: granted %d, %v; want none", g, err)
	}
	clock.Advance(10 * time.Second)
	var probes, granted atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			s, owner := a, "a"
			if i%2 == 1 {
				s, owner = b, "b"
			}
			g, probe, err := s.Grant(ctx, owner, target, 5, forward.Rate{}, time.Minute)
			if err != nil {
				t.Error(err)
			}
			granted.Add(int32(g))
			if probe {
				probes.Add(1)
			}
		})
	}
	wg.Wait()
	if probes.Load() != 1 || granted.Load() != 1 {
		t.Fatalf("%d probes, %d sends granted; want one probe, alone", probes.Load(), granted.Load())
	}
	st, counted, err := b.Report(ctx, target, true, breaker)
	if err != nil || !counted || st.Circuit != forward.Closed {
		t.Fatalf("the probe succeeded: %+v, counted %v, %v; want closed", st, counted, err)
	}
	if g, _, err := a.Grant(ctx, "a", target, 5, forward.Rate{}, time.Minute); err != nil || g != 5 {
		t.Errorf("closed again: granted %d, %v; want 5", g, err)
	}
}

// TestRouteStatesStored checks what a replica reads back is the state the
// rules left, to the microsecond, and that a pause outlives the store that
// set it.
func TestRouteStatesStored(t *testing.T) {
	clock := storetest.NewClock()
	clock.Advance(1234567 * time.Nanosecond)
	dir := t.TempDir()
	a := openTest(t, storetest.Config{Dir: dir, Now: clock.Now})
	breaker := forward.Breaker{Failures: 1, Cooldown: 1500 * time.Millisecond, MaxCooldown: time.Minute}
	st, _, err := a.Report(ctx, target, false, breaker)
	if err != nil {
		t.Fatal(err)
	}
	var want forward.RouteState
	want.Report(false, breaker, clock.Now().Truncate(time.Microsecond))
	want.OpenUntil = want.OpenUntil.UTC()
	if st != want {
		t.Errorf("Report left %+v, want %+v", st, want)
	}
	if err := a.Pause(ctx, target, true); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := openTest(t, storetest.Config{Dir: dir, Now: clock.Now})
	states, err := b.RouteStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want.Paused = true
	if got := states[target]; got != want || len(states) != 1 {
		t.Errorf("read back %+v, want %+v", states, want)
	}
	clock.Advance(time.Minute)
	if g, _, err := b.Grant(ctx, "b", target, 1, forward.Rate{}, time.Minute); err != nil || g != 0 {
		t.Errorf("paused: granted %d, %v", g, err)
	}
	if err := b.Pause(ctx, target, false); err != nil {
		t.Fatal(err)
	}
	if g, probe, err := b.Grant(ctx, "b", target, 1, forward.Rate{}, time.Minute); err != nil || g != 1 || !probe {
		t.Errorf("resumed past the cool-down: granted %d (probe %v), %v; want the probe", g, probe, err)
	}
}
