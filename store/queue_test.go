package store

import (
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

// A settle staged before its lease ended and committed after another owner
// reclaimed the entry applies: the later claim is the one lost.
func TestSettleStagedBeforeAReclaimWins(t *testing.T) {
	q := newQueue()
	now := time.Now()
	q.add(forward.Entry{Seq: 1, Source: "billing", RequestID: "req-1", NextAttemptAt: now}, []byte("{}"))
	q.add(forward.Entry{Seq: 2, Source: "billing", RequestID: "req-2", NextAttemptAt: now}, []byte("{}"))
	a, _ := q.claim("a", "billing", 1, time.Second, now)
	if ok, lost := q.check(&a[0]); !ok || lost {
		t.Fatalf("check of a live claim: ok %v, lost %v", ok, lost)
	}
	b, _ := q.claim("b", "billing", 1, time.Second, now.Add(2*time.Second))
	if len(b) != 1 || b[0].Seq != 1 {
		t.Fatalf("b reclaimed %+v", b)
	}
	eff := forward.Apply(a[0].Entry, forward.Result{State: webhookd.ForwardDelivered})
	q.settle(&a[0], &eff)
	q.settle(&a[0], &eff) // the same settle twice in one batch
	if ok, lost := q.check(&b[0]); ok || !lost {
		t.Errorf("b after a's settle committed: ok %v, lost %v; want lost", ok, lost)
	}
	if ok, lost := q.check(&a[0]); ok || lost {
		t.Errorf("a settled again: ok %v, lost %v; want neither", ok, lost)
	}
	if n := q.pending()["billing"]; n != 1 {
		t.Errorf("pending %d, want req-2 only", n)
	}
	if next, _ := q.claim("b", "billing", 5, time.Second, now.Add(2*time.Second)); len(next) != 1 || next[0].Seq != 2 {
		t.Errorf("then claimed %+v, want req-2", next)
	}
}
