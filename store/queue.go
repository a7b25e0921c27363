package store

import (
	"container/heap"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/webhookd/webhookd/forward"
)

// bodyBudget bounds the bytes of bodies the queue keeps in memory. Entries
// accepted while it has room are claimed with the body the decision wrote,
// which is the common case when forwarding keeps up; the others' bodies are
// read from their payload keys when they are claimed. The entries of one
// delivery's routes share its body's bytes, but each counts them: the
// budget errs on holding less.
const bodyBudget = 32 << 20

// settledMax bounds, per generation, the settled claim tokens the queue
// remembers so that settling a claim again succeeds without effect.
const settledMax = 1 << 16

// queue is the outbox's lanes and claims, in memory: the store holds the
// only writer of its Badger directory, so claims and leases need not be on
// disk, and a restart, which ends every lease, rebuilds the lanes from the
// outbox keys. It holds committed entries only: the writer adds and
// settles entries after their batch commits.
type queue struct {
	mu      sync.Mutex
	targets map[forward.Target]*targetQueue
	token   uint64
	bodies  int // bytes of bodies held
	// settled holds the tokens of claims settled lately, in two
	// generations, as latestCache does.
	settled, settledPrev map[uint64]struct{}
}

// targetQueue is the lanes of one target (source, route).
type targetQueue struct {
	lanes   map[string]*lane
	ready   laneHeap           // lanes whose head is not claimed, by when it is due
	claimed map[*lane]struct{} // lanes whose head is claimed
	// leaseEnds is no later than the first lease of claimed to end, so
	// that claim looks for ended leases only once there may be one.
	leaseEnds time.Time
	n         int // entries
}

// lane is the entries of one (source, route, resource), in outbox order.
type lane struct {
	key   string
	items []*item
}

type item struct {
	entry forward.Entry // without its body
	body  []byte        // when held (see bodyBudget)
	held  bool
	// expiresAt is when the held body's payload key expires, as Badger
	// keeps it (Unix seconds, 0 for never): a body is handed out from
	// memory only while the key it copies would still be read.
	expiresAt uint64
	claimed   bool
	// settling marks a claim whose Settle is staged and not yet committed:
	// its entry is not reclaimed meanwhile, even if the lease ends.
	settling bool
	token    uint64 // the latest claim's
	until    time.Time
}

func newQueue() *queue {
	return &queue{targets: make(map[forward.Target]*targetQueue), settled: make(map[uint64]struct{}), settledPrev: make(map[uint64]struct{})}
}

// laneKey names e's lane within its target: its resource, or its position
// when it has none, as entries without a resource go in parallel.
func laneKey(e *forward.Entry) string {
	if e.Resource != "" {
		return e.Resource
	}
	return "\x00" + strconv.FormatUint(e.Seq, 10)
}

// change is what one committed operation does to the queue: add an entry
// (with its body, when not nil, and its payload's expiry), or settle a
// claim.
type change struct {
	entry     forward.Entry
	body      []byte
	expiresAt uint64
	settle    *settlement
}

type settlement struct {
	claim forward.Claim
	eff   forward.Effect
}

// apply applies the changes a batch committed, in their order.
func (q *queue) apply(changes []change) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range changes {
		if c := &changes[i]; c.settle != nil {
			q.settleLocked(&c.settle.claim, &c.settle.eff)
		} else {
			q.addLocked(c.entry, c.body, c.expiresAt)
		}
	}
}

// add appends e to its lane; body, when not nil, is its body, which the
// queue keeps while the budget allows and its payload key, expiring at
// expiresAt, lives.
func (q *queue) add(e forward.Entry, body []byte, expiresAt uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(e, body, expiresAt)
}

func (q *queue) addLocked(e forward.Entry, body []byte, expiresAt uint64) {
	tq := q.targets[e.Target()]
	if tq == nil {
		tq = &targetQueue{lanes: make(map[string]*lane), claimed: make(map[*lane]struct{})}
		q.targets[e.Target()] = tq
	}
	key := laneKey(&e)
	l := tq.lanes[key]
	if l == nil {
		l = &lane{key: key}
		tq.lanes[key] = l
	}
	e.Body = nil
	it := &item{entry: e}
	if body != nil && q.bodies+len(body) <= bodyBudget {
		it.body, it.held, it.expiresAt = body, true, expiresAt
		q.bodies += len(body)
	}
	l.items = append(l.items, it)
	tq.n++
	if len(l.items) == 1 {
		heap.Push(&tq.ready, l)
	}
}

// claim hands owner up to n of target's due lane heads: those not claimed,
// and those whose lease ended. A claim's Body is nil when the queue does
// not hold it, or holds it past its payload's expiry (the queue then lets
// it go); needBody lists those claims, whose payload keys say whether a
// body is left.
func (q *queue) claim(owner string, target forward.Target, n int, lease time.Duration, now time.Time) (claims []forward.Claim, needBody []int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	tq := q.targets[target]
	if tq == nil || n <= 0 {
		return nil, nil
	}
	take := func(l *lane) {
		it := l.items[0]
		q.token++
		it.claimed, it.token, it.until = true, q.token, now.Add(lease)
		tq.claimed[l] = struct{}{}
		if tq.leaseEnds.IsZero() || it.until.Before(tq.leaseEnds) {
			tq.leaseEnds = it.until
		}
		c := forward.Claim{Entry: it.entry, Owner: owner, Token: it.token, Until: it.until, Newer: len(l.items) > 1}
		if it.held && it.expiresAt != 0 && it.expiresAt <= uint64(now.Unix()) {
			q.bodies -= len(it.body)
			it.body, it.held = nil, false
		}
		if it.held {
			c.Body = it.body
		} else {
			needBody = append(needBody, len(claims))
		}
		claims = append(claims, c)
	}
	// A lease that ended is claimable again, oldest entry first.
	if !tq.leaseEnds.IsZero() && !now.Before(tq.leaseEnds) {
		var expired []*lane
		tq.leaseEnds = time.Time{}
		for l := range tq.claimed {
			h := l.items[0]
			if !h.until.After(now) && !h.settling {
				expired = append(expired, l)
			} else if tq.leaseEnds.IsZero() || h.until.Before(tq.leaseEnds) {
				tq.leaseEnds = h.until
			}
		}
		slices.SortFunc(expired, func(a, b *lane) int { return compareSeq(a.items[0].entry.Seq, b.items[0].entry.Seq) })
		for i, l := range expired {
			if i < n {
				take(l)
			} else if tq.leaseEnds.IsZero() || !tq.leaseEnds.Before(now) {
				tq.leaseEnds = now // left for the next claim
			}
		}
	}
	for len(claims) < n && tq.ready.Len() > 0 && !tq.ready[0].due.After(now) {
		take(heap.Pop(&tq.ready).(*lane))
	}
	return claims, needBody
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// check says whether a Settle of c should write: ok when c still holds
// its entry; lost when another claim took it. Neither: c was settled
// already.
func (q *queue) check(c *forward.Claim) (ok, lost bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.wasSettled(c.Token) {
		return false, false
	}
	if tq := q.targets[c.Target()]; tq != nil {
		if l := tq.lanes[laneKey(&c.Entry)]; l != nil {
			h := l.items[0]
			if h.entry.Seq == c.Seq && h.token == c.Token && h.claimed {
				h.settling = true
				return true, false
			}
		}
	}
	return false, true
}

// settleLocked applies the committed effect of settling c, which passed check
// when it was staged. A settle of c committed twice in one batch applies
// once.
func (q *queue) settleLocked(c *forward.Claim, eff *forward.Effect) {
	if q.wasSettled(c.Token) {
		return
	}
	tq := q.targets[c.Target()]
	l := tq.lanes[laneKey(&c.Entry)]
	if l == nil || l.items[0].entry.Seq != c.Seq {
		return
	}
	if len(q.settled) >= settledMax {
		q.settledPrev, q.settled = q.settled, make(map[uint64]struct{}, len(q.settled))
	}
	q.settled[c.Token] = struct{}{}
	it := l.items[0]
	it.claimed, it.settling = false, false
	delete(tq.claimed, l)
	if eff.Move == forward.Reschedule {
		it.entry = eff.Entry
		it.entry.Body = nil
		heap.Push(&tq.ready, l)
		return
	}
	if it.held {
		q.bodies -= len(it.body)
	}
	l.items[0] = nil
	l.items = l.items[1:]
	tq.n--
	if len(l.items) == 0 {
		delete(tq.lanes, l.key)
		return
	}
	heap.Push(&tq.ready, l)
}

func (q *queue) wasSettled(token uint64) bool {
	_, done := q.settled[token]
	if !done {
		_, done = q.settledPrev[token]
	}
	return done
}

// pending returns how many entries each target has.
func (q *queue) pending() map[forward.Target]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	counts := make(map[forward.Target]int, len(q.targets))
	for target, tq := range q.targets {
		if tq.n > 0 {
			counts[target] = tq.n
		}
	}
	return counts
}

// page returns up to limit of the entries of target (empty fields as in
// Records.Outbox) after position after, in outbox order, without their
// bodies, and whether more follow.
func (q *queue) page(target forward.Target, after uint64, limit int) (entries []forward.Entry, more bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	first := newFirstN(limit, func(a, b *item) int { return compareSeq(a.entry.Seq, b.entry.Seq) })
	for tg, tq := range q.targets {
		if target.Source != "" && tg.Source != target.Source || target.Route != "" && tg.Route != target.Route {
			continue
		}
		for _, l := range tq.lanes {
			for _, it := range l.items {
				if it.entry.Seq > after {
					first.add(it)
				}
			}
		}
	}
	items, more := first.page()
	entries = make([]forward.Entry, len(items))
	for i, it := range items {
		entries[i] = it.entry
	}
	return entries, more
}

// laneHeap orders lanes by when their head is due, then outbox order. It
// keeps each head's due time and position beside its lane: a lane's head
// does not change while the lane waits here, and reading them through the
// lane at every comparison misses the cache.
type laneHeap []readyLane

type readyLane struct {
	due  time.Time
	seq  uint64
	lane *lane
}

func (h laneHeap) Len() int { return len(h) }
func (h laneHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h laneHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *laneHeap) Push(x any) {
	l := x.(*lane)
	head := &l.items[0].entry
	*h = append(*h, readyLane{due: head.NextAttemptAt, seq: head.Seq, lane: l})
}
func (h *laneHeap) Pop() any {
	old := *h
	l := old[len(old)-1].lane
	old[len(old)-1] = readyLane{}
	*h = old[:len(old)-1]
	return l
}
