package store

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

// backlogEntry is the i-th entry of a backlog shaped like the bench's:
// new request IDs over 2,000 resources, versions growing, 1 KB bodies.
func backlogEntry(i int, now time.Time) (forward.Entry, []byte) {
	d := webhookd.Delivery{
		Source: "bench", RequestID: "req-" + strconv.Itoa(i), ReceivedAt: now,
		Resource: "res-" + strconv.Itoa(i%2000), Version: strconv.Itoa(i), ContentType: "application/json",
		Body: make([]byte, 1024),
	}
	e := forward.NewEntry(&d, "ledger")
	e.Seq = uint64(i)
	return e, d.Body
}

// BenchmarkQueueBacklog reports the heap a waiting entry costs in the
// queue (B/entry, bodies held within bodyBudget not counted; held-MiB is
// them), with a backlog of 1,000,000 entries. Each op is the whole fill.
func BenchmarkQueueBacklog(b *testing.B) {
	const n = 1_000_000
	now := time.Now()
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		q := newQueue()
		for i := 1; i <= n; i++ {
			e, body := backlogEntry(i, now)
			q.add(e, body, 0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := q.pending()[forward.Target{Source: "bench", Route: "ledger"}]; got != n {
			b.Fatalf("pending %d, want %d", got, n)
		}
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)-int64(q.bodies))/n, "B/entry")
		b.ReportMetric(float64(q.bodies)/(1<<20), "held-MiB")
		runtime.KeepAlive(q)
	}
}

// BenchmarkClaim measures claiming and settling one entry in memory with
// a backlog behind it: the cost does not grow with the backlog.
func BenchmarkClaim(b *testing.B) {
	for _, backlog := range []int{100, 1_000_000} {
		b.Run(fmt.Sprint("backlog=", backlog), func(b *testing.B) {
			now := time.Now()
			q := newQueue()
			for i := 1; i <= backlog; i++ {
				e, body := backlogEntry(i, now)
				q.add(e, body, 0)
			}
			target := forward.Target{Source: "bench", Route: "ledger"}
			seq := backlog
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				claims, _ := q.claim("bench", target, 1, time.Minute, now)
				if len(claims) != 1 {
					b.Fatalf("claimed %d", len(claims))
				}
				q.check(&claims[0])
				eff := forward.Apply(claims[0].Entry, forward.Result{State: webhookd.ForwardDelivered})
				seq++
				e, body := backlogEntry(seq, now)
				q.apply([]change{{settle: &settlement{claim: claims[0], eff: eff}}, {entry: e, body: body}})
				if n := q.pending()[target]; n != backlog {
					b.Fatalf("pending %d, want %d", n, backlog)
				}
			}
		})
	}
}
