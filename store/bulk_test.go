package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
)

// A page of retries that does not fit in one Badger transaction is
// shortened, and the pages that follow retry the rest, in order.
func TestBulkPageTooBigIsShortened(t *testing.T) {
	// Badger then takes about 150 KB per transaction. The bodies, about
	// 600 bytes, stay below the value threshold: only what is written to
	// the LSM tree counts against a transaction.
	s := openStore(t, t.TempDir(), func(s *Store) { s.memTableSize = 1 << 20 })
	pad := string(make([]byte, 150))
	// In the past, so that every entry is due by the time it is claimed.
	start := time.Now().Add(-time.Minute)
	const n = 300
	var want []string
	for i := range n {
		// Request IDs sort against the order of acceptance.
		d := delivery(fmt.Sprint("req-", n-i+100), "d", fmt.Sprintf(`{"n":%d,"pad":%q}`, i, pad))
		d.Resource, d.ReceivedAt = "inv", start.Add(time.Duration(i)*time.Millisecond)
		mustDecide(t, s, d)
		want = append(want, d.RequestID)
	}
	for range n {
		c := claimAll(t, s)
		if len(c) != 1 {
			t.Fatalf("claimed %d, want the lane's head", len(c))
		}
		if err := s.Settle(ctx, c[0], forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 400, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	page := storage.Page{Limit: n}
	done, pages := 0, 0
	for {
		res, err := s.RetryDeadLetters(ctx, storage.DeadLetterQuery{Target: ledger}, page)
		if err != nil {
			t.Fatal(err)
		}
		done, pages = done+res.Done, pages+1
		if res.Refused != 0 || res.Done == 0 {
			t.Fatalf("page %d: %+v", pages, res)
		}
		if res.Next == "" {
			break
		}
		page.Cursor = res.Next
	}
	if done != n || pages < 2 {
		t.Errorf("retried %d in %d pages, want %d in several", done, pages, n)
	}
	var got []string
	for _, e := range outbox(t, s) {
		got = append(got, e.RequestID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("outbox %v, want %v", got, want)
	}
}

// The routes' states live in memory but for pauses: a restart closes
// every breaker and refills every bucket, and keeps every pause.
func TestRestartKeepsPausesOnly(t *testing.T) {
	s := openStore(t, t.TempDir())
	other := forward.Target{Source: "billing", Route: "other"}
	b := forward.Breaker{Failures: 1, Cooldown: time.Hour, MaxCooldown: time.Hour}
	if st, counted, err := s.Report(ctx, ledger, false, b); err != nil || counted || st.Circuit != forward.Open {
		t.Fatalf("report: %+v, counted %v, %v; want it open", st, counted, err)
	}
	r := forward.Rate{Limit: 1, Burst: 3}
	if g, _, err := s.Grant(ctx, "a", other, 3, r, time.Minute); err != nil || g != 3 {
		t.Fatalf("granted %d, %v", g, err)
	}
	if err := s.Pause(ctx, other, true); err != nil {
		t.Fatal(err)
	}
	s = reopened(t, s)
	if states, err := s.RouteStates(ctx); err != nil || len(states) != 1 || states[other] != (forward.RouteState{Paused: true}) {
		t.Fatalf("route states after reopening: %+v, %v; want other paused only", states, err)
	}
	if g, _, err := s.Grant(ctx, "a", ledger, 5, forward.Rate{}, time.Minute); err != nil || g != 5 {
		t.Errorf("after reopening, granted %d on a route whose breaker was open, %v", g, err)
	}
	if err := s.Pause(ctx, other, false); err != nil {
		t.Fatal(err)
	}
	if g, _, err := s.Grant(ctx, "a", other, 5, r, time.Minute); err != nil || g != 3 {
		t.Errorf("after reopening and resuming, granted %d of a refilled bucket of 3, %v", g, err)
	}
}

// A target naming a route and no source is that route of every source.
func TestListsOfARouteOfEverySource(t *testing.T) {
	s := openStore(t, t.TempDir())
	for _, tg := range []forward.Target{{Source: "billing", Route: "a"}, {Source: "billing", Route: "b"}, {Source: "shipping", Route: "a"}} {
		d := delivery("req", "d", "{}")
		d.Source, d.Routes = tg.Source, []string{tg.Route}
		if tg.Route == "b" {
			d.RequestID = "req-b"
		}
		mustDecide(t, s, d)
	}
	a := forward.Target{Route: "a"}
	list := func(what string, get func(context.Context, forward.Target, storage.Page) ([]forward.Entry, string, error)) {
		t.Helper()
		entries, next, err := get(ctx, a, storage.Page{})
		var got []string
		for _, e := range entries {
			got = append(got, e.Source+"/"+e.Route)
		}
		if err != nil || next != "" || !slices.Equal(got, []string{"billing/a", "shipping/a"}) {
			t.Errorf("%s of route a: %v, next %q, %v", what, got, next, err)
		}
	}
	list("outbox", s.Outbox)
	for _, tg := range []forward.Target{{Source: "billing", Route: "a"}, {Source: "billing", Route: "b"}, {Source: "shipping", Route: "a"}} {
		for _, c := range claimAllOf(t, s, tg) {
			if err := s.Settle(ctx, c, forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 400, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	list("dead letters", s.DeadLetters)
	if res, err := s.RetryDeadLetters(ctx, storage.DeadLetterQuery{Target: a}, storage.Page{}); err != nil || res.Done != 2 || res.Refused != 0 || res.Next != "" {
		t.Errorf("retry of route a's: %+v, %v; want 2 done", res, err)
	}
	list("outbox after the retry", s.Outbox)
}

// A dead letter that replaces one of its request ID, accepted again after
// its receipt expired, replaces its key in the index by age too: bulk
// repair finds it once, and leaves no index key behind.
func TestReplacedDeadLetterLeavesOneIndexKey(t *testing.T) {
	s, decideAt, at := clocked(t)
	die := func() {
		t.Helper()
		c := claimAll(t, s)
		if len(c) != 1 {
			t.Fatalf("claimed %d, want 1", len(c))
		}
		if err := s.Settle(ctx, c[0], forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 400, At: s.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	decideAt(delivery("req-1", "d-1", `{}`))
	die()
	at(3) // the receipt has expired
	decideAt(delivery("req-1", "d-2", `{}`))
	die()
	if n := countKeys(t, s, prefixDeadAge); n != 1 {
		t.Fatalf("%d index keys, want 1", n)
	}
	res, err := s.DiscardDeadLetters(ctx, storage.DeadLetterQuery{Target: ledger}, storage.Page{})
	if err != nil || res.Done != 1 || res.Next != "" {
		t.Fatalf("discarded %+v, %v; want the one", res, err)
	}
	if n := countKeys(t, s, prefixDeadAge); n != 0 {
		t.Errorf("%d index keys left", n)
	}
}

func countKeys(t *testing.T, s *Store, prefix byte) int {
	t.Helper()
	n := 0
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefix}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
