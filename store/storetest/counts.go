package storetest

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
)

// testCountsStayExact checks that Pending and DeadLetterCounts say, target
// by target, how many entries the outbox and the dead letters list, after
// every kind of write to them: decisions fanned out to two routes, settles
// delivered, retrying and dead, a redelivery, the retry and the discard of
// one dead letter, and both in bulk, and across a reopen.
func testCountsStayExact(t *testing.T, open Open) {
	f := newFixture(t, open)
	a, b := forward.Target{Source: source, Route: "a"}, forward.Target{Source: source, Route: "b"}
	c := forward.Target{Source: source, Route: "c"}
	check := func(step string) {
		t.Helper()
		wantPending, wantDead := map[forward.Target]int{}, map[forward.Target]int{}
		for _, tg := range []forward.Target{a, b, c} {
			entries, err := f.outbox(tg)
			if err != nil {
				t.Fatalf("%s: outbox %s: %v", step, tg, err)
			}
			dead, err := f.deadLetters(tg)
			if err != nil {
				t.Fatalf("%s: dead letters %s: %v", step, tg, err)
			}
			if len(entries) > 0 {
				wantPending[tg] = len(entries)
			}
			if len(dead) > 0 {
				wantDead[tg] = len(dead)
			}
		}
		if got, err := f.b.Pending(ctx); err != nil || !maps.Equal(got, wantPending) {
			t.Errorf("%s: Pending %v, %v; the outbox lists %v", step, got, err, wantPending)
		}
		if got, err := f.b.DeadLetterCounts(); err != nil || !maps.Equal(got, wantDead) {
			t.Errorf("%s: DeadLetterCounts %v, %v; the dead letters list %v", step, got, err, wantDead)
		}
	}
	// buryAll settles every entry of route dead, a claim at a time.
	buryAll := func(route string) {
		t.Helper()
		for claims := f.claimOn(route, "w", 5, time.Minute); len(claims) > 0; claims = f.claimOn(route, "w", 5, time.Minute) {
			for _, c := range claims {
				f.settle(c, webhookd.ForwardDead)
			}
		}
	}
	check("empty")
	for i := range 12 {
		f.acceptOn(fmt.Sprintf("r%02d", i), fmt.Sprintf("res%d", i), 1, "a", "b")
	}
	f.acceptOn("solo", "", 0, "c")
	check("accepted")
	claims := f.claimOn("a", "w", 4, time.Minute)
	if len(claims) != 4 {
		t.Fatalf("claimed %v on a, want 4", ids(claims))
	}
	f.settle(claims[0], webhookd.ForwardDelivered)
	f.settle(claims[1], webhookd.ForwardRetrying)
	f.settle(claims[2], webhookd.ForwardDead)
	f.settle(claims[3], webhookd.ForwardDead)
	check("settled delivered, retrying and dead")
	buryAll("b")
	check("every entry of b dead")
	solo := f.claimOn("c", "w", 1, time.Minute)
	if len(solo) != 1 {
		t.Fatalf("claimed %v on c, want solo", ids(solo))
	}
	f.settle(solo[0], webhookd.ForwardDelivered)
	check("delivered on c")
	if err := f.b.Redeliver(ctx, source, "solo", "c"); err != nil {
		t.Fatalf("redeliver solo: %v", err)
	}
	check("redelivered")
	if err := f.b.RetryDeadLetter(ctx, a, claims[2].RequestID); err != nil {
		t.Fatalf("retry %s: %v", claims[2].RequestID, err)
	}
	if err := f.b.DiscardDeadLetter(ctx, a, claims[3].RequestID); err != nil {
		t.Fatalf("discard %s: %v", claims[3].RequestID, err)
	}
	check("one retried, one discarded")
	if done, _ := f.retryAll(storage.DeadLetterQuery{Target: b}, 5); done == 0 {
		t.Fatal("bulk retry of b retried none")
	}
	check("retried in bulk")
	buryAll("b")
	if done, _ := f.discardAll(storage.DeadLetterQuery{Target: b}, 5); done == 0 {
		t.Fatal("bulk discard of b discarded none")
	}
	check("discarded in bulk")
	f.reopen()
	check("reopened")
}
