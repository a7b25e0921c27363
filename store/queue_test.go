package store

import (
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

var ledger = forward.Target{Source: "billing", Route: "ledger"}

// A settle staged before its claim's lease ended holds the entry until it
// commits: no other owner claims it meanwhile and sends it again.
func TestAStagedSettleHoldsItsEntry(t *testing.T) {
	q := newQueue()
	now := time.Now()
	q.add(forward.Entry{Seq: 1, Source: "billing", Route: "ledger", RequestID: "req-1", NextAttemptAt: now}, []byte("{}"), 0)
	q.add(forward.Entry{Seq: 2, Source: "billing", Route: "ledger", RequestID: "req-2", NextAttemptAt: now}, []byte("{}"), 0)
	a, _ := q.claim("a", ledger, 1, time.Second, now)
	if ok, lost := q.check(&a[0]); !ok || lost {
		t.Fatalf("check of a live claim: ok %v, lost %v", ok, lost)
	}
	later := now.Add(2 * time.Second) // a's lease has ended
	if b, _ := q.claim("b", ledger, 1, time.Second, later); len(b) != 1 || b[0].Seq != 2 {
		t.Fatalf("b claimed %+v while a's settle was staged; want req-2 only", b)
	}
	done := &settlement{claim: a[0], eff: forward.Apply(a[0].Entry, forward.Result{State: webhookd.ForwardDelivered})}
	q.apply([]change{{settle: done}, {settle: done}}) // the same settle twice in one batch
	if ok, lost := q.check(&a[0]); ok || lost {
		t.Errorf("a settled again: ok %v, lost %v; want neither", ok, lost)
	}
	if n := q.pending()[ledger]; n != 1 {
		t.Errorf("pending %d, want req-2 only", n)
	}
	if next, _ := q.claim("c", ledger, 5, time.Second, later.Add(2*time.Second)); len(next) != 1 || next[0].Seq != 2 {
		t.Errorf("then claimed %+v, want req-2 once its lease ended", next)
	}
}

// Leases that ended are reclaimed oldest first, as many as asked for; the
// rest are left for the next claim.
func TestEndedLeasesAreReclaimedInTurn(t *testing.T) {
	q := newQueue()
	now := time.Now()
	for seq := uint64(1); seq <= 3; seq++ {
		q.add(forward.Entry{Seq: seq, Source: "billing", Route: "ledger", RequestID: "req", NextAttemptAt: now}, nil, 0)
	}
	if got, _ := q.claim("a", ledger, 3, time.Second, now); len(got) != 3 {
		t.Fatalf("claimed %d, want 3", len(got))
	}
	if got, _ := q.claim("b", ledger, 3, time.Second, now.Add(999*time.Millisecond)); len(got) != 0 {
		t.Fatalf("claimed %d within the leases", len(got))
	}
	later := now.Add(time.Second)
	for _, want := range []uint64{1, 2, 3} {
		got, _ := q.claim("b", ledger, 1, time.Second, later)
		if len(got) != 1 || got[0].Seq != want || got[0].Owner != "b" {
			t.Fatalf("claimed %+v, want entry %d", got, want)
		}
	}
	if got, _ := q.claim("c", ledger, 3, time.Second, later); len(got) != 0 {
		t.Errorf("claimed %d once b held them all", len(got))
	}
}
