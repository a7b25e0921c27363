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
