package postgres

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/store/storetest"
)

// TestSettleBatchOfAnEntrysClaims settles, in one batch, an expired claim,
// the claim that took its entry over, and that claim again: the holder
// settles, the expired claim has lost its lease, and the repeat is a
// repeat.
func TestSettleBatchOfAnEntrysClaims(t *testing.T) {
	clock := storetest.NewClock()
	s := openTest(t, storetest.Config{Dir: t.TempDir(), Now: clock.Now})
	if _, err := s.Decide(ctx, delivery("req-1", "", 0, "x")); err != nil {
		t.Fatal(err)
	}
	expired, err := s.Claim(ctx, "a", target, 1, time.Minute)
	if err != nil || len(expired) != 1 {
		t.Fatalf("first claim: %d, %v", len(expired), err)
	}
	clock.Advance(2 * time.Minute)
	holder, err := s.Claim(ctx, "b", target, 1, time.Minute)
	if err != nil || len(holder) != 1 || holder[0].Seq != expired[0].Seq {
		t.Fatalf("second claim: %+v, %v", holder, err)
	}
	delivered := forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: clock.Now()}
	ops := []*settleOp{
		{c: expired[0], r: delivered, done: make(chan error, 1)},
		{c: holder[0], r: delivered, done: make(chan error, 1)},
		{c: holder[0], r: delivered, done: make(chan error, 1)},
	}
	s.settleBatch(ops)
	if err := <-ops[0].done; !errors.Is(err, forward.ErrLeaseLost) {
		t.Errorf("expired claim: %v, want %v", err, forward.ErrLeaseLost)
	}
	for _, o := range ops[1:] {
		if err := <-o.done; err != nil {
			t.Errorf("holder: %v, want nil", err)
		}
	}
	r, err := s.Receipt(ctx, "billing", "req-1")
	if err != nil || len(r.Routes) != 1 || r.Routes[0].State != webhookd.ForwardDelivered {
		t.Fatalf("receipt %+v, %v; want its route delivered", r, err)
	}
	if pending, err := s.Pending(ctx); err != nil || len(pending) != 0 {
		t.Errorf("pending %v, %v; want none", pending, err)
	}
}

// TestSettleInterleavedRoutesOnReplicas settles, on two replicas at once,
// interleaved routes of the same receipts, every claim of a round at once so
// that a batch holds several routes of one receipt and every move: the
// replicas' batches write the same receipts, and none fails or loses
// another's status.
func TestSettleInterleavedRoutesOnReplicas(t *testing.T) {
	stores := replicas(t, 2)
	routes := []string{"a", "b", "c", "d"}
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	result := func(route string) forward.Result {
		switch route {
		case "b":
			return forward.Result{State: webhookd.ForwardRetrying, Attempts: 1, Status: 503, NextAttemptAt: later}
		case "c":
			return forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 400, At: time.Now()}
		}
		return forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: time.Now()}
	}
	const rounds, requests = 15, 24
	for round := range rounds {
		for i := range requests {
			d := delivery(fmt.Sprintf("req-%d-%d", round, i), "", 0, "x")
			d.Routes = routes
			if _, err := stores[0].Decide(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Go(func() {
				var claims []forward.Claim
				for _, route := range []string{routes[i], routes[i+2]} {
					c, err := s.Claim(ctx, route, forward.Target{Source: "billing", Route: route}, requests, time.Minute)
					if err != nil || len(c) != requests {
						t.Errorf("claim on %s: %d claims, %v", route, len(c), err)
						return
					}
					claims = append(claims, c...)
				}
				var settles sync.WaitGroup
				for j := range requests {
					for _, c := range []forward.Claim{claims[j], claims[requests+j]} {
						settles.Go(func() {
							if err := s.Settle(ctx, c, result(c.Route)); err != nil {
								t.Errorf("settle %s/%s: %v", c.Target(), c.RequestID, err)
							}
						})
					}
				}
				settles.Wait()
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
	want := map[string]webhookd.ForwardState{"a": webhookd.ForwardDelivered, "b": webhookd.ForwardRetrying,
		"c": webhookd.ForwardDead, "d": webhookd.ForwardDelivered}
	for round := range rounds {
		for i := range requests {
			r, err := stores[1].Receipt(ctx, "billing", fmt.Sprintf("req-%d-%d", round, i))
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Routes) != len(routes) {
				t.Fatalf("%s: routes %+v", r.RequestID, r.Routes)
			}
			for _, rs := range r.Routes {
				if rs.State != want[rs.Route] || rs.LastStatus != result(rs.Route).Status {
					t.Errorf("%s: route %s is %+v, want %s with status %d", r.RequestID, rs.Route, rs, want[rs.Route],
						result(rs.Route).Status)
				}
			}
		}
	}
	pending, err := stores[0].Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := stores[1].DeadLetterCounts()
	if err != nil {
		t.Fatal(err)
	}
	b, c := forward.Target{Source: "billing", Route: "b"}, forward.Target{Source: "billing", Route: "c"}
	if len(pending) != 1 || pending[b] != rounds*requests || len(dead) != 1 || dead[c] != rounds*requests {
		t.Errorf("pending %v, dead letters %v; want only %d of route b pending and %d of route c dead",
			pending, dead, rounds*requests, rounds*requests)
	}
}
