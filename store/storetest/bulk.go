package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
)

// testListPages checks the pages of Outbox and DeadLetters: bounded,
// in order, continued by the cursor after entries settle or arrive
// between pages, and a bad cursor refused.
func testListPages(t *testing.T, open Open) {
	f := newFixture(t, open)
	a := forward.Target{Source: source, Route: "a"}
	for i := range 10 {
		f.acceptOn(fmt.Sprint("e", i), "", 0, "a")
	}
	items, next, err := f.b.Outbox(ctx, a, storage.Page{Limit: 4})
	if err != nil || next == "" || !slices.Equal(routed(items), []string{"a/e0", "a/e1", "a/e2", "a/e3"}) {
		t.Fatalf("first page %v, next %q, %v; want e0 to e3 and a cursor", routed(items), next, err)
	}
	f.settle(f.claimOn("a", "w", 1, time.Minute)[0], webhookd.ForwardDelivered) // e0, listed already
	items, next, err = f.b.Outbox(ctx, a, storage.Page{Limit: 4, Cursor: next})
	if err != nil || next == "" || !slices.Equal(routed(items), []string{"a/e4", "a/e5", "a/e6", "a/e7"}) {
		t.Fatalf("second page %v, next %q, %v; want e4 to e7 and a cursor", routed(items), next, err)
	}
	f.acceptOn("late", "", 0, "a")
	var rest []forward.Entry
	for next != "" {
		items, next, err = f.b.Outbox(ctx, a, storage.Page{Limit: 4, Cursor: next})
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, items...)
	}
	if !slices.Equal(routed(rest), []string{"a/e8", "a/e9", "a/late"}) {
		t.Errorf("last pages %v, want e8, e9, then the late one", routed(rest))
	}
	if items, next, err := f.b.Outbox(ctx, a, storage.Page{}); err != nil || next != "" || len(items) != 10 {
		t.Errorf("one page of the default size: %d entries, next %q, %v; want all 10", len(items), next, err)
	}

	for range 6 {
		f.settle(f.claimOn("a", "w", 1, time.Minute)[0], webhookd.ForwardDead)
	}
	all, err := listAll(f.b.DeadLetters, a, storage.MaxLimit)
	if err != nil || len(all) != 6 {
		t.Fatalf("dead letters %v, %v", routed(all), err)
	}
	for _, limit := range []int{1, 2, 4, 5} {
		if paged, err := listAll(f.b.DeadLetters, a, limit); err != nil || !slices.Equal(routed(paged), routed(all)) {
			t.Errorf("dead letters %d a page: %v, %v; want %v", limit, routed(paged), err, routed(all))
		}
	}
	first, next, err := f.b.DeadLetters(ctx, a, storage.Page{Limit: 3})
	if err != nil || len(first) != 3 {
		t.Fatalf("dead letters' first page %v, %v", routed(first), err)
	}
	if err := f.b.DiscardDeadLetter(ctx, a, first[0].RequestID); err != nil {
		t.Fatal(err)
	}
	if second, _, err := f.b.DeadLetters(ctx, a, storage.Page{Limit: 3, Cursor: next}); err != nil || !slices.Equal(routed(second), routed(all[3:])) {
		t.Errorf("after discarding one of the first page, the second %v, %v; want %v", routed(second), err, routed(all[3:]))
	}

	for _, cursor := range []string{"not a cursor", "%%%", "AAAA"} {
		_, _, err := f.b.Outbox(ctx, a, storage.Page{Cursor: cursor})
		wantCode(t, "outbox with a bad cursor "+cursor, err, webhookd.EINVALID)
		_, _, err = f.b.DeadLetters(ctx, a, storage.Page{Cursor: cursor})
		wantCode(t, "dead letters with a bad cursor "+cursor, err, webhookd.EINVALID)
	}
}

// bulk runs a bulk repair page by page to its end, limit a page, and
// returns its counts.
func (f *fixture) bulk(repair func(q storage.DeadLetterQuery, p storage.Page) (storage.BulkResult, error), q storage.DeadLetterQuery, limit int) (done, refused int) {
	f.t.Helper()
	p := storage.Page{Limit: limit}
	for pages := 1; ; pages++ {
		if pages > 100_000 {
			f.t.Fatalf("bulk repair %+v: no end after %d pages", q, pages)
		}
		res, err := repair(q, p)
		if err != nil {
			f.t.Fatalf("bulk repair %+v: %v", q, err)
		}
		if res.Done+res.Refused > p.Size() {
			f.t.Fatalf("bulk repair %+v: a page of %d done and %d refused, limit %d", q, res.Done, res.Refused, p.Size())
		}
		done, refused = done+res.Done, refused+res.Refused
		if res.Next == "" {
			return done, refused
		}
		p.Cursor = res.Next
	}
}

func (f *fixture) retryAll(q storage.DeadLetterQuery, limit int) (done, refused int) {
	f.t.Helper()
	return f.bulk(func(q storage.DeadLetterQuery, p storage.Page) (storage.BulkResult, error) {
		return f.b.RetryDeadLetters(ctx, q, p)
	}, q, limit)
}

func (f *fixture) discardAll(q storage.DeadLetterQuery, limit int) (done, refused int) {
	f.t.Helper()
	return f.bulk(func(q storage.DeadLetterQuery, p storage.Page) (storage.BulkResult, error) {
		return f.b.DiscardDeadLetters(ctx, q, p)
	}, q, limit)
}

// testBulkRepairs checks RetryDeadLetters and DiscardDeadLetters: by
// target and by when the dead letters died, a page at a time; retried
// entries go back in the order they were accepted, whatever their
// request IDs; one a newer version superseded is refused, stays, and is
// counted.
func testBulkRepairs(t *testing.T, open Open) {
	f := newFixture(t, open)
	a, b := forward.Target{Source: source, Route: "a"}, forward.Target{Source: source, Route: "b"}
	shipping := forward.Target{Source: "shipping", Route: "a"}
	// Three requests of one resource, whose request IDs sort against
	// the order they were accepted in.
	f.acceptOn("z", "inv", 0, "a", "b")
	f.clock.Advance(time.Second)
	f.acceptOn("m", "inv", 0, "a")
	f.clock.Advance(time.Second)
	f.acceptOn("c", "inv", 0, "a")
	f.clock.Advance(time.Second)
	f.acceptOn("old", "doc", 1, "a")
	s := f.delivery("s", "", 0, "s")
	s.Source, s.Routes = "shipping", []string{"a"}
	f.decide(s)

	bury := func(tg forward.Target, want ...string) {
		t.Helper()
		claims, err := f.b.Claim(ctx, "w", tg, 10, time.Minute)
		if err != nil || !slices.Equal(ids(claims), want) {
			t.Fatalf("claimed %v on %s, %v; want %v", ids(claims), tg, err, want)
		}
		for _, c := range claims {
			f.settle(c, webhookd.ForwardDead)
		}
	}
	t1 := f.clock.Now()
	bury(a, "z", "old")
	bury(b, "z")
	bury(shipping, "s")
	f.clock.Advance(time.Minute)
	bury(a, "m")
	f.clock.Advance(time.Minute)
	t3 := f.clock.Now()
	bury(a, "c")
	f.acceptOn("new", "doc", 2, "a") // supersedes old

	if done, refused := f.retryAll(storage.DeadLetterQuery{Target: shipping, Until: t1}, 10); done != 0 || refused != 0 {
		t.Errorf("retry of none that died before %v: %d done, %d refused", t1, done, refused)
	}
	if done, refused := f.discardAll(storage.DeadLetterQuery{Target: a, Since: t3}, 10); done != 1 || refused != 0 {
		t.Errorf("discard of a's since %v: %d done, %d refused; want c", t3, done, refused)
	}
	if st := f.status("c", "a"); st.State != webhookd.ForwardDiscarded {
		t.Errorf("c after the bulk discard: %+v", st)
	}
	if done, refused := f.retryAll(storage.DeadLetterQuery{Target: forward.Target{Source: source}}, 1); done != 3 || refused != 1 {
		t.Errorf("retry of billing's, one a page: %d done, %d refused; want 3 and old refused", done, refused)
	}
	f.wantStates("z retried", "z", webhookd.ForwardPending, webhookd.ForwardPending)
	if st := f.status("old", "a"); st.State != webhookd.ForwardDead {
		t.Errorf("old after a refused retry: %+v", st)
	}
	if entries, err := f.outbox(a); err != nil || !slices.Equal(routed(entries), []string{"a/new", "a/z", "a/m"}) {
		t.Errorf("outbox of a %v, %v; want new, then z and m as they were accepted", routed(entries), err)
	}
	if n, err := f.b.DeadLetterCounts(); err != nil || !maps.Equal(n, map[forward.Target]int{a: 1, shipping: 1}) {
		t.Errorf("dead letters after the retry: %v, %v; want old and s", n, err)
	}
	if done, refused := f.retryAll(storage.DeadLetterQuery{Target: a}, 10); done != 0 || refused != 1 {
		t.Errorf("retry of old again: %d done, %d refused", done, refused)
	}
	if done, refused := f.discardAll(storage.DeadLetterQuery{}, 10); done != 2 || refused != 0 {
		t.Errorf("discard of all: %d done, %d refused; want old and s", done, refused)
	}
	if st := f.status("old", "a"); st.State != webhookd.ForwardDiscarded {
		t.Errorf("old after the bulk discard: %+v", st)
	}
	if n, err := f.b.DeadLetterCounts(); err != nil || len(n) != 0 {
		t.Errorf("dead letters after discarding all: %v, %v", n, err)
	}
	if done, refused := f.retryAll(storage.DeadLetterQuery{}, 0); done != 0 || refused != 0 {
		t.Errorf("retry of none: %d done, %d refused", done, refused)
	}
	_, err := f.b.RetryDeadLetters(ctx, storage.DeadLetterQuery{}, storage.Page{Cursor: "not a cursor"})
	wantCode(t, "bulk retry with a bad cursor", err, webhookd.EINVALID)
	_, err = f.b.DiscardDeadLetters(ctx, storage.DeadLetterQuery{}, storage.Page{Cursor: "not a cursor"})
	wantCode(t, "bulk discard with a bad cursor", err, webhookd.EINVALID)
}

// testBulkRetryAtScale dead-letters 10,000 entries of 100 resources and
// retries them all: every one is back in the outbox, the counts are
// right, and each resource's entries are in the order accepted.
func testBulkRetryAtScale(t *testing.T, open Open) {
	if testing.Short() {
		t.Skip("10,000 dead letters: not with -short")
	}
	f := newFixture(t, open)
	const resources, each = 100, 100
	start := f.clock.Now()
	// A resource's k'th request has request ID <resource>-<each-k>, so
	// that request IDs sort against the order of acceptance.
	var wg sync.WaitGroup
	for r := range resources {
		wg.Go(func() {
			for k := range each {
				d := webhookd.Delivery{Source: source, RequestID: fmt.Sprintf("res%03d-%03d", r, each-k), Resource: fmt.Sprint("res", r),
					Fingerprint: "fp", ReceivedAt: start.Add(time.Duration(k) * time.Millisecond), Forward: true, Routes: []string{route}, Body: []byte("{}")}
				if out, err := f.b.Decide(ctx, d); err != nil || out.Decision != webhookd.Accepted {
					t.Errorf("decide %s: %+v, %v", d.RequestID, out, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	f.clock.Advance(time.Second) // every entry is due
	for {
		claims, err := f.b.Claim(ctx, "w", target, storage.MaxLimit, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(claims) == 0 {
			break
		}
		for _, c := range claims {
			wg.Go(func() {
				r := forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 400, At: f.clock.Now()}
				if err := f.b.Settle(ctx, c, r); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	if n, err := f.b.DeadLetterCounts(); err != nil || n[target] != resources*each {
		t.Fatalf("dead letters %v, %v; want %d", n, err, resources*each)
	}
	if done, refused := f.retryAll(storage.DeadLetterQuery{Target: target}, storage.MaxLimit); done != resources*each || refused != 0 {
		t.Errorf("retried %d, refused %d; want all %d", done, refused, resources*each)
	}
	if n, err := f.b.DeadLetterCounts(); err != nil || len(n) != 0 {
		t.Errorf("dead letters after the retry: %v, %v", n, err)
	}
	if n, err := f.b.Pending(ctx); err != nil || n[target] != resources*each {
		t.Errorf("pending after the retry: %v, %v; want %d", n, err, resources*each)
	}
	entries, err := listAll(f.b.Outbox, target, storage.MaxLimit)
	if err != nil || len(entries) != resources*each {
		t.Fatalf("outbox of %d entries, %v", len(entries), err)
	}
	last := make(map[string]int) // each resource's last k seen
	for _, e := range entries {
		_, n, _ := strings.Cut(e.RequestID, "-")
		k, _ := strconv.Atoi(n)
		k = each - k
		if prev, ok := last[e.Resource]; ok && k != prev+1 || !ok && k != 0 {
			t.Fatalf("outbox has %s after the %d'th of %s", e.RequestID, prev, e.Resource)
		}
		last[e.Resource] = k
	}
	if st := f.status("res042-001", route); st.State != webhookd.ForwardPending {
		t.Errorf("a retried entry's receipt: %+v", st)
	}
}
