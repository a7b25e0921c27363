package sender_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
)

// countingQueue records how many entries each Claim asked for.
type countingQueue struct {
	backend
	mu   sync.Mutex
	asks []int
}

func (q *countingQueue) Claim(ctx context.Context, owner string, target forward.Target, n int, lease time.Duration) ([]forward.Claim, error) {
	q.mu.Lock()
	q.asks = append(q.asks, n)
	q.mu.Unlock()
	return q.backend.Claim(ctx, owner, target, n, lease)
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
	start(t, q, map[forward.Target]sender.Route{target("billing"): r})
	t.Cleanup(func() { close(release) }) // before the forwarder closes: it waits for its requests
	eventually(t, "eight requests in flight", func() bool { return down.active.Load() == 8 })
	asked := len(q.since(0))
	release <- struct{}{} // one slot frees
	eventually(t, "the first answer recorded", func() bool { return pending(t, q)[target("billing")] == 19 })
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

// A slot that frees is no reason to claim: only a commit the queue
// notifies of, a poll or a due retry is. Once the one entry of an
// otherwise empty outbox is in flight, its answer and settle cost one
// claim, the one its settle's notification makes.
func TestFreedSlotsAloneDoNotClaim(t *testing.T) {
	release := make(chan struct{})
	down := newDownstream(t, func(r *http.Request, n int) int {
		<-release
		return http.StatusOK
	})
	q := &countingQueue{backend: openStore(t, t.TempDir())}
	accept(t, q, "billing", "req-1", "", 0)
	f := sender.New(q, map[forward.Target]sender.Route{target("billing"): route(down.URL)}, zaptest.NewLogger(t))
	f.PollInterval = time.Hour
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	eventually(t, "the request in flight", func() bool { return down.active.Load() == 1 })
	time.Sleep(50 * time.Millisecond) // the commit's notification passes
	asked := len(q.since(0))
	close(release)
	eventually(t, "the entry forwarded", func() bool { return pending(t, q)[target("billing")] == 0 })
	time.Sleep(50 * time.Millisecond) // the forwarder's wake-ups pass
	if asks := q.since(asked); len(asks) > 1 {
		t.Errorf("after the request was answered, the forwarder claimed %d times (%v), want 1 at most", len(asks), asks)
	}
}

// failingQueue fails every Claim and depth read while failing is set, and
// every Settle while failSettles is, as a queue in a database that is down
// does.
type failingQueue struct {
	backend
	failing, failSettles  atomic.Bool
	failed, settlesFailed atomic.Int32
}

var errQueueDown = &webhookd.Error{Code: webhookd.EUNAVAILABLE, Message: "database unavailable"}

func (q *failingQueue) Claim(ctx context.Context, owner string, target forward.Target, n int, lease time.Duration) ([]forward.Claim, error) {
	if q.failing.Load() {
		q.failed.Add(1)
		return nil, errQueueDown
	}
	return q.backend.Claim(ctx, owner, target, n, lease)
}

func (q *failingQueue) Pending(ctx context.Context) (map[forward.Target]int, error) {
	if q.failing.Load() {
		return nil, errQueueDown
	}
	return q.backend.Pending(ctx)
}

func (q *failingQueue) Settle(ctx context.Context, c forward.Claim, r forward.Result) error {
	if q.failSettles.Load() {
		q.settlesFailed.Add(1)
		return errQueueDown
	}
	return q.backend.Settle(ctx, c, r)
}

// While the queue is down, the forwarder logs the first failure of each
// kind and when it succeeds again, not every failed claim, depth read or
// settle.
func TestQueueFailuresLogOnce(t *testing.T) {
	down := newDownstream(t, func(r *http.Request, n int) int { return http.StatusOK })
	q := &failingQueue{backend: openStore(t, t.TempDir())}
	q.failing.Store(true)
	core, logs := observer.New(zapcore.InfoLevel)
	f := sender.New(q, map[forward.Target]sender.Route{target("billing"): route(down.URL)}, zap.New(core))
	f.PollInterval = 5 * time.Millisecond
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	eventually(t, "50 failed claims", func() bool { return q.failed.Load() >= 50 })
	q.failSettles.Store(true)
	q.failing.Store(false)
	for i := range 4 {
		accept(t, q, "billing", fmt.Sprint("req-", i), "", 0)
	}
	eventually(t, "4 failed settles", func() bool { return q.settlesFailed.Load() >= 4 })
	q.failSettles.Store(false)
	eventually(t, "the entries forwarded", func() bool { return pending(t, q)[target("billing")] == 0 })
	for msg, want := range map[string]int{
		"claim outbox entries":           1,
		"claims succeed again":           1,
		"read outbox depth":              1,
		"outbox depth read again":        1,
		"settle forward attempt":         1,
		"forward results recorded again": 1,
	} {
		if n := logs.FilterMessage(msg).Len(); n != want {
			t.Errorf("%d lines %q, want %d (%d claims and %d settles failed)", n, msg, want, q.failed.Load(), q.settlesFailed.Load())
		}
	}
}

// heldQueue holds the claims of one target until told to answer them, as
// a database slow to answer a claim does. A held claim has already been
// made when it is held: it answers with what was due before it was held.
type heldQueue struct {
	backend
	target forward.Target
	held   chan struct{} // a claim of target is held
	answer chan struct{} // one held claim answers
}

func newHeldQueue(b backend, t forward.Target) *heldQueue {
	return &heldQueue{backend: b, target: t, held: make(chan struct{}, 16), answer: make(chan struct{})}
}

// awaitHeld waits for a claim of the target to be held.
func (q *heldQueue) awaitHeld(t *testing.T, what string) {
	t.Helper()
	select {
	case <-q.held:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s after 10 s", what)
	}
}

func (q *heldQueue) Claim(ctx context.Context, owner string, target forward.Target, n int, lease time.Duration) ([]forward.Claim, error) {
	claims, err := q.backend.Claim(ctx, owner, target, n, lease)
	if target == q.target {
		q.held <- struct{}{}
		<-q.answer
	}
	return claims, err
}

// A claim the queue is slow to answer holds up only its own route: the
// other routes' claims and sends go on meanwhile.
func TestSlowClaimHoldsUpOnlyItsRoute(t *testing.T) {
	down := newDownstream(t, func(r *http.Request, n int) int { return http.StatusOK })
	q := newHeldQueue(openStore(t, t.TempDir()), target("slow"))
	f := sender.New(q, map[forward.Target]sender.Route{target("slow"): route(down.URL), target("quick"): route(down.URL)}, zaptest.NewLogger(t))
	f.PollInterval = time.Hour
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(q.answer) // every held claim answers, so that Close returns
		f.Close(ctx)
	})
	q.awaitHeld(t, "claim of the slow route at open")
	accept(t, q, "quick", "req-1", "", 0)
	eventually(t, "the quick route's entry forwarded while the slow route's claim is held", func() bool {
		return pending(t, q)[target("quick")] == 0
	})
}

// A commit that lands while a route's claim is out is a reason to claim
// again, even when that claim comes back with fewer entries than it asked
// for: the claim may have run before the commit.
func TestCommitDuringAClaimIsNotLost(t *testing.T) {
	down := newDownstream(t, func(r *http.Request, n int) int { return http.StatusOK })
	q := newHeldQueue(openStore(t, t.TempDir()), target("billing"))
	f := sender.New(q, map[forward.Target]sender.Route{target("billing"): route(down.URL)}, zaptest.NewLogger(t))
	f.PollInterval = time.Hour // no poll makes up for a lost notification
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(q.answer)
		f.Close(ctx)
	})
	q.awaitHeld(t, "claim at open")
	accept(t, q, "billing", "req-1", "", 0)
	time.Sleep(50 * time.Millisecond) // the commit's notification reaches the forwarder
	q.answer <- struct{}{}            // the claim, made on an empty outbox, answers: nothing
	q.awaitHeld(t, "claim for the commit made while the first claim was out")
	q.answer <- struct{}{}
	eventually(t, "the entry committed during the claim forwarded", func() bool {
		return pending(t, q)[target("billing")] == 0
	})
}
