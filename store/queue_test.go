package store

import (
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
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

// Entries the queue does not hold whole, as after a restart, are claimed
// whole from Badger: metadata, body, and what a retry changed.
func TestUnheldEntriesAreClaimedWhole(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	d := versioned("req-1", "res-1", 1)
	d.Headers, d.Trace = map[string]string{"X-Tenant": "acme"}, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	mustDecide(t, s, d)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	c, err := s.Claim(ctx, "w", ledger, 5, time.Minute)
	if err != nil || len(c) != 1 {
		t.Fatalf("claimed %+v, %v; want req-1", c, err)
	}
	got := c[0]
	if got.RequestID != "req-1" || got.Resource != "res-1" || got.Version != "1" || got.ContentType != "application/json" ||
		got.Headers["X-Tenant"] != "acme" || got.Trace != d.Trace || string(got.Body) != string(d.Body) || !got.CreatedAt.Equal(d.ReceivedAt) {
		t.Fatalf("claimed %+v with body %q; want the decided entry and body %q", got.Entry, got.Body, d.Body)
	}
	due := time.Now().Add(-time.Second)
	if err := s.Settle(ctx, got, forward.Result{State: webhookd.ForwardRetrying, Attempts: 1, Status: 503, NextAttemptAt: due}); err != nil {
		t.Fatal(err)
	}
	c, err = s.Claim(ctx, "w", ledger, 5, time.Minute)
	if err != nil || len(c) != 1 {
		t.Fatalf("claimed %+v, %v after the retry; want req-1", c, err)
	}
	if c[0].Attempts != 1 || c[0].LastStatus != 503 || string(c[0].Body) != string(d.Body) {
		t.Errorf("claimed %+v with body %q after the retry; want attempt 1, status 503 and the body", c[0].Entry, c[0].Body)
	}
}

// A page of one target among many others' entries reads at most
// storage.MaxExamined keys: it comes back short, with a cursor that
// leads to the target's entries.
func TestOutboxPagesAreBounded(t *testing.T) {
	s := openStore(t, t.TempDir())
	fill(t, s, storage.MaxExamined+10) // to billing/ledger
	d := versioned("other", "res-x", 1)
	d.Routes = []string{"audit"}
	mustDecide(t, s, d)
	audit := forward.Target{Source: "billing", Route: "audit"}
	items, next, err := s.Outbox(ctx, audit, storage.Page{Limit: 10})
	if err != nil || len(items) != 0 || next == "" {
		t.Fatalf("first page %d entries, next %q, %v; want none and a cursor", len(items), next, err)
	}
	items, next, err = s.Outbox(ctx, audit, storage.Page{Limit: 10, Cursor: next})
	if err != nil || len(items) != 1 || items[0].RequestID != "other" || next != "" {
		t.Fatalf("second page %+v, next %q, %v; want the audit entry and no cursor", items, next, err)
	}
	items, next, err = s.Outbox(ctx, ledger, storage.Page{Limit: 10})
	if err != nil || len(items) != 10 || items[0].RequestID == "" || next == "" {
		t.Fatalf("ledger's first page %d entries, next %q, %v; want 10 and a cursor", len(items), next, err)
	}
}
