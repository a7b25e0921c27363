package store

import (
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

// A settle staged before its claim's lease ended holds the entry until it
// commits: no other owner claims it meanwhile and sends it again.
func TestAStagedSettleHoldsItsEntry(t *testing.T) {
	q := newQueue()
	now := time.Now()
	q.add(forward.Entry{Seq: 1, Source: "billing", RequestID: "req-1", NextAttemptAt: now}, []byte("{}"))
	q.add(forward.Entry{Seq: 2, Source: "billing", RequestID: "req-2", NextAttemptAt: now}, []byte("{}"))
	a, _ := q.claim("a", "billing", 1, time.Second, now)
	if ok, lost := q.check(&a[0]); !ok || lost {
		t.Fatalf("check of a live claim: ok %v, lost %v", ok, lost)
	}
	later := now.Add(2 * time.Second) // a's lease has ended
	if b, _ := q.claim("b", "billing", 1, time.Second, later); len(b) != 1 || b[0].Seq != 2 {
		t.Fatalf("b claimed %+v while a's settle was staged; want req-2 only", b)
	}
	eff := forward.Apply(a[0].Entry, forward.Result{State: webhookd.ForwardDelivered})
	q.settle(&a[0], &eff)
	q.settle(&a[0], &eff) // the same settle twice in one batch
	if ok, lost := q.check(&a[0]); ok || lost {
		t.Errorf("a settled again: ok %v, lost %v; want neither", ok, lost)
	}
	if n := q.pending()["billing"]; n != 1 {
		t.Errorf("pending %d, want req-2 only", n)
	}
	if next, _ := q.claim("c", "billing", 5, time.Second, later.Add(2*time.Second)); len(next) != 1 || next[0].Seq != 2 {
		t.Errorf("then claimed %+v, want req-2 once its lease ended", next)
	}
}
