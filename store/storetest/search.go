package storetest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/storage"
)

// newestFirst is the order of Receipts: first seen, then source, then
// request ID, each descending, which is a keyset cursor's order.
func newestFirst(a, b dedupe.Receipt) int {
	return cmp.Or(b.FirstSeen.Compare(a.FirstSeen), cmp.Compare(b.Source, a.Source), cmp.Compare(b.RequestID, a.RequestID))
}

// matches says whether q selects r, as the contract reads.
func matches(q storage.ReceiptQuery, r *dedupe.Receipt) bool {
	switch {
	case q.Source != "" && r.Source != q.Source,
		q.Decision != "" && r.Decision != q.Decision,
		q.Resource != "" && r.Resource != q.Resource,
		!q.Since.IsZero() && r.FirstSeen.Before(q.Since),
		!q.Until.IsZero() && !r.FirstSeen.Before(q.Until):
		return false
	case q.Route == "" && q.ForwardState == "":
		return true
	}
	for _, rs := range r.Routes {
		if (q.Route == "" || rs.Route == q.Route) && (q.ForwardState == "" || rs.State == q.ForwardState) {
			return true
		}
	}
	return false
}

func receiptID(r dedupe.Receipt) string { return r.Source + "/" + r.RequestID }

func receiptIDs(rs []dedupe.Receipt) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, receiptID(r))
	}
	return out
}

// search pages through what q selects to the end, calling between(n)
// after the n'th page. Pages are bounded, newest first, and never repeat
// a receipt.
func (f *fixture) search(q storage.ReceiptQuery, between func(page int)) []dedupe.Receipt {
	f.t.Helper()
	var all []dedupe.Receipt
	seen := make(map[string]bool)
	for page := 1; ; page++ {
		if page > 100_000 {
			f.t.Fatalf("search %+v: no end after %d pages", q, page)
		}
		items, next, err := f.b.Receipts(ctx, q)
		if err != nil {
			f.t.Fatalf("search %+v: %v", q, err)
		}
		if len(items) > q.Size() {
			f.t.Fatalf("search %+v: a page of %d receipts", q, len(items))
		}
		for _, r := range items {
			if seen[receiptID(r)] {
				f.t.Fatalf("search %+v: %s on two pages", q, receiptID(r))
			}
			seen[receiptID(r)] = true
			if len(all) > 0 && newestFirst(all[len(all)-1], r) >= 0 {
				f.t.Fatalf("search %+v: %s after %s", q, receiptID(r), receiptID(all[len(all)-1]))
			}
			all = append(all, r)
		}
		if next == "" {
			return all
		}
		q.Cursor = next
		if between != nil {
			between(page)
		}
	}
}

// testReceiptSearch checks every filter of Receipts, alone and combined,
// against the receipts held, through pages of two; that a page carries
// each route's current forward status; that receipts arriving, and
// redeliveries, between pages neither repeat nor hide one; that expired
// receipts are not found; and that a bad cursor is refused.
func testReceiptSearch(t *testing.T, open Open) {
	f := newFixture(t, open)
	t0 := f.clock.Now()
	held := []struct{ source, requestID string }{}
	decide := func(d webhookd.Delivery, want webhookd.Decision) {
		t.Helper()
		d.ReceivedAt = f.clock.Now()
		if out := f.decide(d); out.Decision != want {
			t.Fatalf("%s/%s: %s, want %s", d.Source, d.RequestID, out.Decision, want)
		}
		if want != webhookd.Duplicate && want != webhookd.Conflict {
			held = append(held, struct{ source, requestID string }{d.Source, d.RequestID})
		}
	}
	routed := func(requestID, resource string, version uint64, routes ...string) webhookd.Delivery {
		d := f.delivery(requestID, resource, version, `{"id":"`+requestID+`"}`)
		d.Routes = routes
		return d
	}
	decide(routed("a1", "inv-1", 1, "a", "b"), webhookd.Accepted)
	f.clock.Advance(time.Second)
	decide(routed("a2", "inv-1", 2, "a"), webhookd.Accepted)
	f.clock.Advance(time.Second)
	decide(routed("s1", "inv-1", 1, "a"), webhookd.Stale)
	f.clock.Advance(time.Second)
	x1 := routed("x1", "box", 1, "a")
	x1.Source = "shipping"
	decide(x1, webhookd.Accepted)
	f.clock.Advance(time.Second)
	// Three first seen at one time: source and request ID order them.
	decide(routed("t1", "", 0, "a"), webhookd.Accepted)
	decide(routed("t2", "", 0, "a"), webhookd.Accepted)
	t0s := routed("t0", "", 0, "a")
	t0s.Source = "shipping"
	decide(t0s, webhookd.Accepted)
	f.clock.Advance(time.Second)
	quiet := routed("quiet", "", 0)
	quiet.Forward = false
	decide(quiet, webhookd.Accepted)
	f.clock.Advance(time.Second)
	decide(routed("n1", "inv-2", 1), webhookd.Accepted)

	claims := f.claimOn("a", "w", 10, time.Minute)
	if got := ids(claims); !slices.Equal(got, []string{"a1", "t1", "t2"}) {
		t.Fatalf("claimed %v on a, want a1, t1, t2", got)
	}
	f.settle(claims[0], webhookd.ForwardDead)
	f.settle(claims[1], webhookd.ForwardDelivered)
	f.settle(claims[2], webhookd.ForwardRetrying)
	f.settle(f.claimOn("b", "w", 10, time.Minute)[0], webhookd.ForwardDelivered)
	decide(routed("a1", "inv-1", 1, "a", "b"), webhookd.Duplicate)
	conflict := routed("t1", "", 0, "a")
	conflict.Fingerprint = "other"
	decide(conflict, webhookd.Conflict)

	var all []dedupe.Receipt
	for _, h := range held {
		r, err := f.b.Receipt(ctx, h.source, h.requestID)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, *r)
	}
	slices.SortFunc(all, newestFirst)
	want := func(q storage.ReceiptQuery) []string {
		var out []string
		for i := range all {
			if matches(q, &all[i]) {
				out = append(out, receiptID(all[i]))
			}
		}
		return out
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	queries := []struct {
		q    storage.ReceiptQuery
		want []string // what the query must find, spelt out for some
	}{
		{storage.ReceiptQuery{}, []string{"billing/n1", "billing/quiet", "shipping/t0", "billing/t2", "billing/t1", "shipping/x1", "billing/s1", "billing/a2", "billing/a1"}},
		{storage.ReceiptQuery{Source: source}, nil},
		{storage.ReceiptQuery{Source: "shipping"}, []string{"shipping/t0", "shipping/x1"}},
		{storage.ReceiptQuery{Source: "nobody"}, []string{}},
		{storage.ReceiptQuery{Decision: webhookd.Stale}, []string{"billing/s1"}},
		{storage.ReceiptQuery{Decision: webhookd.Accepted}, nil},
		{storage.ReceiptQuery{Source: source, Decision: webhookd.Accepted}, nil},
		{storage.ReceiptQuery{Source: source, Resource: "inv-1"}, []string{"billing/s1", "billing/a2", "billing/a1"}},
		{storage.ReceiptQuery{Source: source, Resource: "inv-1", Decision: webhookd.Accepted}, []string{"billing/a2", "billing/a1"}},
		{storage.ReceiptQuery{Source: source, Route: "b"}, []string{"billing/a1"}},
		{storage.ReceiptQuery{Source: source, Route: "a"}, nil},
		{storage.ReceiptQuery{ForwardState: webhookd.ForwardDead}, []string{"billing/a1"}},
		{storage.ReceiptQuery{ForwardState: webhookd.ForwardRetrying}, []string{"billing/t2"}},
		{storage.ReceiptQuery{ForwardState: webhookd.ForwardDelivered}, []string{"billing/t1", "billing/a1"}},
		{storage.ReceiptQuery{ForwardState: webhookd.ForwardPending}, nil},
		{storage.ReceiptQuery{Source: source, Route: "b", ForwardState: webhookd.ForwardDead}, []string{}},
		{storage.ReceiptQuery{Source: source, Route: "a", ForwardState: webhookd.ForwardDead}, []string{"billing/a1"}},
		{storage.ReceiptQuery{Since: at(time.Second), Until: at(3 * time.Second)}, []string{"billing/s1", "billing/a2"}},
		{storage.ReceiptQuery{Since: at(4 * time.Second)}, []string{"billing/n1", "billing/quiet", "shipping/t0", "billing/t2", "billing/t1"}},
		{storage.ReceiptQuery{Until: at(time.Second)}, []string{"billing/a1"}},
		{storage.ReceiptQuery{Source: source, Since: at(4 * time.Second), Until: at(5 * time.Second)}, []string{"billing/t2", "billing/t1"}},
	}
	for _, tc := range queries {
		for _, limit := range []int{2, 0} {
			q := tc.q
			q.Limit = limit
			got := receiptIDs(f.search(q, nil))
			if tc.want != nil && !slices.Equal(got, tc.want) {
				t.Errorf("search %+v: %v, want %v", q, got, tc.want)
			}
			if w := want(q); !slices.Equal(got, w) {
				t.Errorf("search %+v: %v, want what it selects of the receipts held: %v", q, got, w)
			}
		}
	}
	for _, r := range f.search(storage.ReceiptQuery{ForwardState: webhookd.ForwardDead}, nil) {
		if a, b := r.Route("a"), r.Route("b"); a == nil || a.State != webhookd.ForwardDead || a.Attempts != 1 || b == nil || b.State != webhookd.ForwardDelivered {
			t.Errorf("found %s with routes %+v, want dead on a after one attempt, delivered on b", receiptID(r), r.Routes)
		}
		if r.Attempts != 2 || r.Decision != webhookd.Accepted || r.Resource != "inv-1" || r.Version != "1" {
			t.Errorf("found %+v, want a1 as its receipt says", r)
		}
	}

	// Receipts that arrive between pages are newer than the cursor, and
	// a redelivery leaves its receipt where it was.
	arrived := 0
	got := f.search(storage.ReceiptQuery{Page: storage.Page{Limit: 2}}, func(page int) {
		f.clock.Advance(time.Second)
		decide(routed(fmt.Sprint("late-", page), "", 0, "a"), webhookd.Accepted)
		decide(routed("t2", "", 0, "a"), webhookd.Duplicate)
		arrived++
	})
	if w := want(storage.ReceiptQuery{}); !slices.Equal(receiptIDs(got), w) {
		t.Errorf("paged while %d receipts arrived: %v, want %v", arrived, receiptIDs(got), w)
	}
	if got := f.search(storage.ReceiptQuery{Source: source, Page: storage.Page{Limit: 100}}, nil); len(got) != 7+arrived || got[0].RequestID != fmt.Sprint("late-", arrived) {
		t.Errorf("after %d arrived, found %v", arrived, receiptIDs(got))
	}

	for _, cursor := range []string{"not a cursor", "%%%", "AAAA"} {
		_, _, err := f.b.Receipts(ctx, storage.ReceiptQuery{Page: storage.Page{Cursor: cursor}})
		wantCode(t, "search with a bad cursor "+cursor, err, webhookd.EINVALID)
	}

	f.clock.Advance(f.cfg.ReceiptTTL + time.Minute)
	if got := f.search(storage.ReceiptQuery{}, nil); len(got) != 0 {
		t.Errorf("found %v past their TTL", receiptIDs(got))
	}
	decide(routed("fresh", "", 0, "a"), webhookd.Accepted)
	if got := receiptIDs(f.search(storage.ReceiptQuery{}, nil)); !slices.Equal(got, []string{"billing/fresh"}) {
		t.Errorf("found %v, want the fresh receipt only", got)
	}
}

// testReceiptSearchAtScale decides 100,000 requests concurrently and
// pages through them, all and by selective filters, while new ones
// arrive and old ones are delivered again.
func testReceiptSearchAtScale(t *testing.T, open Open) {
	if testing.Short() {
		t.Skip("100,000 decisions: not with -short")
	}
	f := newFixture(t, open)
	const n = 100_000
	start := f.clock.Now()
	// Every 100th is shipping's, forwarded to route a; every 1000th of
	// billing's is of resource "rare".
	delivery := func(i int) webhookd.Delivery {
		d := webhookd.Delivery{Source: source, RequestID: fmt.Sprintf("r%06d", i), DeliveryID: fmt.Sprint("d", i),
			Fingerprint: "fp", ReceivedAt: start.Add(time.Duration(i) * time.Millisecond), Body: []byte("{}")}
		switch {
		case i%100 == 0:
			d.Source, d.Forward, d.Routes = "shipping", true, []string{"a"}
		case i%1000 == 1:
			d.Resource = "rare"
		}
		return d
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if out, err := f.b.Decide(ctx, delivery(i)); err != nil || out.Decision != webhookd.Accepted {
					t.Errorf("decide %d: %+v, %v", i, out, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// wantDesc is the request IDs of the receipts i selects of [from,
	// to), newest first.
	wantDesc := func(from, to int, sel func(i int) bool) []string {
		var out []string
		for i := to - 1; i >= from; i-- {
			if sel(i) {
				d := delivery(i)
				out = append(out, d.Source+"/"+d.RequestID)
			}
		}
		return out
	}
	every := func(int) bool { return true }

	// While the operator pages, new requests arrive and old ones come
	// again.
	late := 0
	got := f.search(storage.ReceiptQuery{Page: storage.Page{Limit: 5000}}, func(page int) {
		for range 10 {
			d := delivery(n + late) // newer than any
			d.Source, d.RequestID, d.Resource, d.Forward, d.Routes = source, fmt.Sprint("late-", late), "", false, nil
			if _, err := f.b.Decide(ctx, d); err != nil {
				t.Fatal(err)
			}
			late++
		}
		if _, err := f.b.Decide(ctx, delivery(page*997%n)); err != nil {
			t.Fatal(err)
		}
	})
	if w := wantDesc(0, n, every); !slices.Equal(receiptIDs(got), w) {
		t.Errorf("paged through %d receipts while %d arrived, want the %d there were at first", len(got), late, n)
	}
	searches := []struct {
		q    storage.ReceiptQuery
		want []string
	}{
		{storage.ReceiptQuery{Source: "shipping", Page: storage.Page{Limit: 100}}, wantDesc(0, n, func(i int) bool { return i%100 == 0 })},
		{storage.ReceiptQuery{Source: "shipping", Route: "a", ForwardState: webhookd.ForwardPending, Page: storage.Page{Limit: 300}}, wantDesc(0, n, func(i int) bool { return i%100 == 0 })},
		{storage.ReceiptQuery{Source: source, Resource: "rare", Page: storage.Page{Limit: 7}}, wantDesc(0, n, func(i int) bool { return i%1000 == 1 })},
		{storage.ReceiptQuery{Since: start.Add(10 * time.Second), Until: start.Add(20 * time.Second), Page: storage.Page{Limit: 1000}}, wantDesc(10_000, 20_000, every)},
		{storage.ReceiptQuery{Source: "shipping", Since: start.Add(10 * time.Second), Until: start.Add(20 * time.Second)}, wantDesc(10_000, 20_000, func(i int) bool { return i%100 == 0 })},
		{storage.ReceiptQuery{Decision: webhookd.Stale, Page: storage.Page{Limit: 1000}}, nil},
	}
	for _, s := range searches {
		if got := receiptIDs(f.search(s.q, nil)); !slices.Equal(got, s.want) {
			t.Errorf("search %+v: %d receipts, want %d", s.q, len(got), len(s.want))
		}
	}
}
