package sender_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
)

// countingQueue records how many entries each Claim asked for.
type countingQueue struct {
	backend
	mu   sync.Mutex
	asks []int
}

func (q *countingQueue) Claim(ctx context.Context, owner, source string, n int, lease time.Duration) ([]forward.Claim, error) {
	q.mu.Lock()
	q.asks = append(q.asks, n)
	q.mu.Unlock()
	return q.backend.Claim(ctx, owner, source, n, lease)
}

func (q *countingQueue) since(i int) []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]int(nil), q.asks[i:]...)
}

// With jobs in flight, a route claims again only once a quarter of its
// slots are free: a queue in a shared database answers few claims.
func TestClaimsAreGrouped(t *testing.T) {
	release := make(chan struct{})
	down := newDownstream(t, func(r *http.Request, n int) int {
		<-release
		return http.StatusOK
	})
	q := &countingQueue{backend: openStore(t, t.TempDir())}
	for i := range 20 {
		accept(t, q, "billing", fmt.Sprint("req-", i), "", 0)
	}
	r := route(down.URL)
	r.Concurrency = 8
	start(t, q, map[string]sender.Route{"billing": r})
	t.Cleanup(func() { close(release) }) // before the forwarder closes: it waits for its requests
	eventually(t, "eight requests in flight", func() bool { return down.active.Load() == 8 })
	asked := len(q.since(0))
	release <- struct{}{} // one slot frees
	eventually(t, "the first answer recorded", func() bool { return pending(t, q)["billing"] == 19 })
	time.Sleep(50 * time.Millisecond) // the forwarder's wake-ups pass
	if asks := q.since(asked); len(asks) != 0 {
		t.Errorf("with one of eight slots free, the forwarder claimed %v", asks)
	}
	release <- struct{}{} // two free: a quarter
	eventually(t, "a claim for two", func() bool {
		for _, n := range q.since(asked) {
			if n == 2 {
				return true
			}
		}
		return false
	})
}
