package postgres

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/postgres/pgtest"
	"github.com/webhookd/webhookd/storage"
)

// benchRoutes are the routes of the benchmarks' deliveries: the first one,
// or all three.
var benchRoutes = []string{"billing", "analytics", "audit"}

func openBench(b *testing.B) *Store {
	b.Helper()
	s := New(pgtest.SchemaDSN(b, b.Name()))
	s.Logger = zap.NewNop()
	if err := s.Open(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// benchDelivery is delivery i of a 1 KB body, on routes.
func benchDelivery(i int64, routes []string) webhookd.Delivery {
	d := delivery(fmt.Sprint("req-", i), fmt.Sprint("res-", i%1000), uint64(i), `{"pad":"`+strings.Repeat("x", 1000)+`"}`)
	d.Routes = routes
	return d
}

// BenchmarkDecideRoutes measures accepted deliveries forwarded to one
// route and to three, many in flight as under load: a delivery on three
// routes writes three outbox entries beside its one receipt, latest
// version and payload.
func BenchmarkDecideRoutes(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			s := openBench(b)
			var next atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Decide(ctx, benchDelivery(next.Add(1), benchRoutes[:n])); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkForwardRoutes measures the outbox's side of forwarding one
// request to one route and to three: each route's forwarder claims its
// lane heads and settles them delivered, each settle writing its route's
// status into the receipt. An op is one request forwarded to every route.
func BenchmarkForwardRoutes(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			s := openBench(b)
			var wg sync.WaitGroup
			for i := range int64(b.N) {
				wg.Go(func() {
					if _, err := s.Decide(ctx, benchDelivery(i, benchRoutes[:n])); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			b.ResetTimer()
			for _, route := range benchRoutes[:n] {
				wg.Go(func() { forwardAll(b, s, forward.Target{Source: "billing", Route: route}) })
			}
			wg.Wait()
		})
	}
}

// forwardAll claims and settles target's entries until none is left.
func forwardAll(b *testing.B, s *Store, target forward.Target) {
	for {
		claims, err := s.Claim(ctx, target.Route, target, 64, time.Minute)
		if err != nil || len(claims) == 0 {
			if err != nil {
				b.Error(err)
			}
			return
		}
		var wg sync.WaitGroup
		for _, c := range claims {
			wg.Go(func() {
				res := forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: time.Now()}
				if err := s.Settle(ctx, c, res); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}

// fill runs sql, which inserts $1 rows, with n.
func fill(b *testing.B, s *Store, sql string, n int) {
	b.Helper()
	if _, err := s.pool.Exec(ctx, sql, n); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSearchReceipts measures a page of 100 receipts of a search
// over 100,000, every source's and one source's, from a cursor deep in
// them. An op is one page.
func BenchmarkSearchReceipts(b *testing.B) {
	s := openBench(b)
	fill(b, s, `INSERT INTO webhookd_receipts (source, request_id, resource, version, decision, duplicate_decision,
			ordering_decision, latest_version_at_decision, payload_sha256, first_seen, last_seen, attempts, deliveries,
			unrouted, routes, expires_at)
		SELECT CASE WHEN i % 10 = 0 THEN 'shipping' ELSE 'billing' END, 'req-' || i, 'res-' || (i % 1000), '1',
			'accepted', 'new', 'first', '', 'sha', now() - i * interval '1 ms', now(), 1, '[]', false,
			'{"default": {"position": 0, "state": "delivered", "attempts": 1}}', now() + interval '1 day'
		FROM generate_series(1, $1::integer) AS i`, 100_000)
	for _, source := range []string{"", "shipping"} {
		b.Run("source="+source, func(b *testing.B) {
			first, next, err := s.Receipts(ctx, storage.ReceiptQuery{Source: source, Page: storage.Page{Limit: 5000}})
			if err != nil || len(first) == 0 || next == "" {
				b.Fatalf("%d receipts, next %q, %v", len(first), next, err)
			}
			q := storage.ReceiptQuery{Source: source, Page: storage.Page{Cursor: next}}
			for b.Loop() {
				if items, _, err := s.Receipts(ctx, q); err != nil || len(items) != storage.DefaultLimit {
					b.Fatalf("%d receipts, %v", len(items), err)
				}
			}
		})
	}
}

// BenchmarkRetryDeadLetters measures bulk retry in pages of the largest
// size. An op is one dead letter retried.
func BenchmarkRetryDeadLetters(b *testing.B) {
	s := openBench(b)
	const receipt = `INSERT INTO webhookd_receipts (source, request_id, resource, version, decision, duplicate_decision,
			ordering_decision, latest_version_at_decision, payload_sha256, first_seen, last_seen, attempts, deliveries,
			unrouted, routes, expires_at)
		SELECT 'billing', 'req-' || i, 'res-' || i, '', 'accepted', 'new', 'first', '', 'sha',
			'2026-01-01'::timestamptz + i * interval '1 ms', now(), 1, '[]', false,
			'{"default": {"position": 0, "state": "dead", "attempts": 1}}', 'infinity'
		FROM generate_series(1, $1::integer) AS i`
	const dead = `INSERT INTO webhookd_dead_letters (source, route, request_id, resource, version, content_type, headers,
			created_at, attempts, next_attempt_at, last_status, last_error, dead_at, body)
		SELECT 'billing', 'default', 'req-' || i, 'res-' || i, '', 'application/json', '{}',
			'2026-01-01'::timestamptz + i * interval '1 ms', 1, now(), 400, '', now(), '{"pad":"` + "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" + `"}'
		FROM generate_series(1, $1::integer) AS i`
	fill(b, s, receipt, b.N)
	fill(b, s, dead, b.N)
	b.ResetTimer()
	var page storage.Page
	page.Limit = storage.MaxLimit
	done := 0
	for {
		res, err := s.RetryDeadLetters(ctx, storage.DeadLetterQuery{Target: target}, page)
		if err != nil {
			b.Fatal(err)
		}
		done += res.Done
		if page.Cursor = res.Next; page.Cursor == "" {
			break
		}
	}
	if done != b.N {
		b.Fatalf("retried %d of %d", done, b.N)
	}
}
