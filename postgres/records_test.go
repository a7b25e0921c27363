package postgres

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/store/storetest"
)

// TestSearchReadsABoundedWalk searches for the oldest of more than
// storage.MaxExamined receipts: the first page reads MaxExamined of them,
// finds none, and gives a cursor, from which the next page finds it.
func TestSearchReadsABoundedWalk(t *testing.T) {
	s := openTest(t, storetest.Config{Dir: t.TempDir()})
	_, err := s.pool.Exec(ctx, `INSERT INTO webhookd_receipts (source, request_id, resource, version, decision,
			duplicate_decision, ordering_decision, latest_version_at_decision, payload_sha256, first_seen, last_seen,
			attempts, deliveries, unrouted, routes, expires_at)
		SELECT 'billing', 'req-' || i, CASE WHEN i = 1 THEN 'rare' ELSE 'common' END, '', 'accepted', 'new', 'first', '',
			'sha', now() + i * interval '1 ms', now(), 1, '[]', false, '{}', now() + interval '1 day'
		FROM generate_series(1, $1::integer) AS i`, storage.MaxExamined+500)
	if err != nil {
		t.Fatal(err)
	}
	for _, source := range []string{"", "billing"} {
		q := storage.ReceiptQuery{Source: source, Resource: "rare"}
		items, next, err := s.Receipts(ctx, q)
		if err != nil || len(items) != 0 || next == "" {
			t.Fatalf("source %q: first page %d receipts, next %q, %v; want none and a cursor", source, len(items), next, err)
		}
		q.Cursor = next
		items, next, err = s.Receipts(ctx, q)
		if err != nil || len(items) != 1 || items[0].RequestID != "req-1" || next != "" {
			t.Errorf("source %q: second page %d receipts, next %q, %v; want req-1 and the end", source, len(items), next, err)
		}
	}
	q := storage.ReceiptQuery{Page: storage.Page{Limit: 3, Cursor: "eyJzZXEiOjF9"}} // an outbox cursor
	if _, _, err := s.Receipts(ctx, q); webhookd.ErrorCode(err) != webhookd.EINVALID {
		t.Errorf("a cursor of another list: %v, want invalid", err)
	}
}

// TestBulkRetryOfOneRequestsRoutes retries, in one page, the dead letters
// of requests on two routes each: each route's entry is queued again,
// sharing the request's one payload, and its receipt says both routes are
// pending; a request a newer version superseded is refused and stays.
func TestBulkRetryOfOneRequestsRoutes(t *testing.T) {
	clock := storetest.NewClock()
	s := openTest(t, storetest.Config{Dir: t.TempDir(), Now: clock.Now})
	routes := []string{"a", "b"}
	for i := range 3 {
		d := delivery(fmt.Sprint("req-", i), fmt.Sprint("sub-", i%2), uint64(i+1), fmt.Sprint(i))
		d.ReceivedAt, d.Routes = clock.Now(), routes
		if _, err := s.Decide(ctx, d); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Millisecond)
	}
	for _, route := range routes {
		to := forward.Target{Source: "billing", Route: route}
		for {
			claims, err := s.Claim(ctx, "w", to, 10, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if len(claims) == 0 {
				break
			}
			for _, c := range claims {
				res := forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 400, At: clock.Now()}
				if err := s.Settle(ctx, c, res); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	res, err := s.RetryDeadLetters(ctx, storage.DeadLetterQuery{Target: forward.Target{Source: "billing"}}, storage.Page{})
	// req-0 is of sub-0, which req-2 superseded.
	if err != nil || res.Done != 4 || res.Refused != 2 || res.Next != "" {
		t.Fatalf("retry: %+v, %v; want 4 done, 2 refused, one page", res, err)
	}
	outbox, _, err := s.Outbox(ctx, forward.Target{}, storage.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range outbox {
		got = append(got, e.Route+"/"+e.RequestID)
	}
	if want := []string{"a/req-1", "b/req-1", "a/req-2", "b/req-2"}; !slices.Equal(got, want) {
		t.Errorf("outbox %v, want %v", got, want)
	}
	var payloads int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM webhookd_payloads WHERE request_id IN ('req-1', 'req-2')`).Scan(&payloads); err != nil || payloads != 2 {
		t.Errorf("%d payloads, %v; want one a request", payloads, err)
	}
	r, err := s.Receipt(ctx, "billing", "req-2")
	if err != nil || r.Route("a").State != webhookd.ForwardPending || r.Route("b").State != webhookd.ForwardPending {
		t.Errorf("receipt after the retry: %+v, %v", r, err)
	}
	dead, _, err := s.DeadLetters(ctx, forward.Target{}, storage.Page{})
	if err != nil || len(dead) != 2 || dead[0].RequestID != "req-0" {
		t.Errorf("dead letters left %+v, %v; want req-0's two", dead, err)
	}
	res, err = s.DiscardDeadLetters(ctx, storage.DeadLetterQuery{Target: forward.Target{Source: "billing", Route: "b"}}, storage.Page{Limit: 1})
	if err != nil || res.Done != 1 || res.Next != "" {
		t.Errorf("discard on route b: %+v, %v; want req-0's, and no more", res, err)
	}
	if r, err := s.Receipt(ctx, "billing", "req-0"); err != nil || r.Route("b").State != webhookd.ForwardDiscarded || r.Route("a").State != webhookd.ForwardDead {
		t.Errorf("receipt after the discard: %+v, %v", r, err)
	}
}
