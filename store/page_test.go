package store

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
)

// BenchmarkOutboxPage measures the first page of 100 of an outbox of
// backlog entries: a page costs what it lists, not the backlog.
func BenchmarkOutboxPage(b *testing.B) {
	for _, backlog := range []int{100, 20_000} {
		b.Run(fmt.Sprint("backlog=", backlog), func(b *testing.B) {
			s := New(b.TempDir())
			if err := s.Open(); err != nil {
				b.Fatal(err)
			}
			fill(b, s, backlog)
			s = reopen(b, s)
			defer s.Close()
			target := forward.Target{Source: "billing", Route: "ledger"}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				items, _, err := s.Outbox(ctx, target, storage.Page{Limit: 100})
				if err != nil || len(items) != 100 {
					b.Fatalf("%d entries, %v", len(items), err)
				}
			}
		})
	}
}

// BenchmarkDeadLetterPage measures selecting the first page of 100 of a
// bulk repair among dead dead letters of the target: a page costs what it
// selects, not the target's dead letters.
func BenchmarkDeadLetterPage(b *testing.B) {
	for _, dead := range []int{100, 10_000} {
		b.Run(fmt.Sprint("dead=", dead), func(b *testing.B) {
			s := New(b.TempDir())
			if err := s.Open(); err != nil {
				b.Fatal(err)
			}
			fill(b, s, dead)
			target := forward.Target{Source: "billing", Route: "ledger"}
			for {
				claims, err := s.Claim(ctx, "bench", target, 1000, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if len(claims) == 0 {
					break
				}
				var wg sync.WaitGroup
				for _, c := range claims {
					wg.Go(func() {
						if err := s.Settle(ctx, c, forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 400, At: time.Now()}); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			s = reopen(b, s)
			defer s.Close()
			q := storage.DeadLetterQuery{Target: target}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				refs, _, err := s.selectDead(q, storage.Page{Limit: 100})
				if err != nil || len(refs) != 100 {
					b.Fatalf("%d dead letters, %v", len(refs), err)
				}
			}
		})
	}
}

// reopen closes s and opens its directory again: what was written is in
// tables, and the benchmark's reads run beside no flush.
func reopen(b *testing.B, s *Store) *Store {
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	s = New(s.Path)
	if err := s.Open(); err != nil {
		b.Fatal(err)
	}
	return s
}
