package store

import (
	"container/heap"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/webhookd/webhookd/forward"
)

// bodyBudget bounds the bytes of entries the queue holds whole, with
// their bodies, in memory. Entries accepted while it has room are claimed
// as the decision wrote them, which is the common case when forwarding
// keeps up; the others are read from their outbox and payload keys when
// they are claimed, and the queue keeps only their place (item), so that
// a backlog of millions costs little memory. The entries of one
// delivery's routes share its body's bytes, but each counts them: the
// budget errs on holding less.
const bodyBudget = 32 << 20

// heldCost is what the budget counts for a held entry beside its body:
// its metadata, so that entries with empty bodies are bounded too.
const heldCost = 256

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
	leaseEnds int64
	n         int // entries
}

// lane is the entries of one (source, route, resource), in outbox order.
// Its items are values, not pointers: a waiting entry costs one item in
// one slice.
type lane struct {
	key   string
	items []item
}

// item is one waiting entry's place in its lane. Times are Unix
// nanoseconds: a time.Time is three times the size.
type item struct {
	seq  uint64
	due  int64 // when the entry is next attempted
	held *held // nil when the entry is read from Badger at its claim
	// token is the latest claim's; until, when its lease ends.
	token uint64
	until int64
	// claimed marks a claimed entry; settling, a claim whose Settle is
	// staged and not yet committed: its entry is not reclaimed meanwhile,
	// even if the lease ends.
	claimed, settling bool
}

// held is an entry the queue holds whole (see bodyBudget).
type held struct {
	entry forward.Entry // with its body
	// expiresAt is when the body's payload key expires, as Badger keeps it
	// (Unix seconds, 0 for never): a body is handed out from memory only
	// while the key it copies would still be read.
	expiresAt uint64
}

// cost is what h counts against bodyBudget.
func (h *held) cost() int { return heldCost + len(h.entry.Body) }

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

// isSeqLane says whether a lane key is a position's, not a resource's.
func isSeqLane(key string) bool { return key != "" && key[0] == 0 }

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
		// The map keeps its own copies: e's strings may share a larger
		// buffer, such as the request's.
		q.targets[forward.Target{Source: strings.Clone(e.Source), Route: strings.Clone(e.Route)}] = tq
	}
	key := laneKey(&e)
	l := tq.lanes[key]
	if l == nil {
		key = strings.Clone(key)
		l = &lane{key: key}
		tq.lanes[key] = l
	}
	it := item{seq: e.Seq, due: e.NextAttemptAt.UnixNano()}
	if body != nil && q.bodies+heldCost+len(body) <= bodyBudget {
		e.Body = body
		it.held = &held{entry: e, expiresAt: expiresAt}
		q.bodies += it.held.cost()
	}
	l.items = append(l.items, it)
	tq.n++
	if len(l.items) == 1 {
		heap.Push(&tq.ready, l)
	}
}

// claim hands owner up to n of target's due lane heads: those not claimed,
// and those whose lease ended. A claim of an entry the queue does not hold
// whole, or holds past its payload's expiry (the queue then lets it go),
// carries only the entry's position, target and lane: unread lists those
// claims, whose entries are read from their outbox keys, and their bodies
// from their payload keys, which say whether a body is left.
func (q *queue) claim(owner string, target forward.Target, n int, lease time.Duration, now time.Time) (claims []forward.Claim, unread []int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	tq := q.targets[target]
	if tq == nil || n <= 0 {
		return nil, nil
	}
	nowNano := now.UnixNano()
	take := func(l *lane) {
		it := &l.items[0]
		q.token++
		it.claimed, it.token, it.until = true, q.token, now.Add(lease).UnixNano()
		tq.claimed[l] = struct{}{}
		if tq.leaseEnds == 0 || it.until < tq.leaseEnds {
			tq.leaseEnds = it.until
		}
		if h := it.held; h != nil && h.expiresAt != 0 && h.expiresAt <= uint64(now.Unix()) {
			q.bodies -= h.cost()
			it.held = nil
		}
		c := forward.Claim{Owner: owner, Token: it.token, Until: time.Unix(0, it.until), Newer: len(l.items) > 1}
		if it.held != nil {
			c.Entry = it.held.entry
		} else {
			c.Entry = forward.Entry{Seq: it.seq, Source: target.Source, Route: target.Route}
			if !isSeqLane(l.key) {
				c.Resource = l.key
			}
			unread = append(unread, len(claims))
		}
		claims = append(claims, c)
	}
	// A lease that ended is claimable again, oldest entry first.
	if tq.leaseEnds != 0 && nowNano >= tq.leaseEnds {
		var expired []*lane
		tq.leaseEnds = 0
		for l := range tq.claimed {
			h := &l.items[0]
			if h.until <= nowNano && !h.settling {
				expired = append(expired, l)
			} else if tq.leaseEnds == 0 || h.until < tq.leaseEnds {
				tq.leaseEnds = h.until
			}
		}
		slices.SortFunc(expired, func(a, b *lane) int { return compareSeq(a.items[0].seq, b.items[0].seq) })
		for i, l := range expired {
			if i < n {
				take(l)
			} else if tq.leaseEnds == 0 || tq.leaseEnds >= nowNano {
				tq.leaseEnds = nowNano // left for the next claim
			}
		}
	}
	for len(claims) < n && tq.ready.Len() > 0 && tq.ready[0].due <= nowNano {
		take(heap.Pop(&tq.ready).(*lane))
	}
	return claims, unread
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
			h := &l.items[0]
			if h.seq == c.Seq && h.token == c.Token && h.claimed {
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
	if l == nil || l.items[0].seq != c.Seq {
		return
	}
	if len(q.settled) >= settledMax {
		q.settledPrev, q.settled = q.settled, make(map[uint64]struct{}, len(q.settled))
	}
	q.settled[c.Token] = struct{}{}
	it := &l.items[0]
	it.claimed, it.settling = false, false
	delete(tq.claimed, l)
	if eff.Move == forward.Reschedule {
		// The outbox key holds the rescheduled entry; a held one is
		// kept as it now is, with the body it had.
		it.due = eff.Entry.NextAttemptAt.UnixNano()
		if h := it.held; h != nil {
			body := h.entry.Body
			h.entry = eff.Entry
			h.entry.Body = body
		}
		heap.Push(&tq.ready, l)
		return
	}
	if it.held != nil {
		q.bodies -= it.held.cost()
	}
	l.items[0] = item{}
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

// laneHeap orders lanes by when their head is due, then outbox order. It
// keeps each head's due time and position beside its lane: a lane's head
// does not change while the lane waits here, and reading them through the
// lane at every comparison misses the cache.
type laneHeap []readyLane

type readyLane struct {
	due  int64
	seq  uint64
	lane *lane
}

func (h laneHeap) Len() int { return len(h) }
func (h laneHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].seq < h[j].seq
}
func (h laneHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *laneHeap) Push(x any) {
	l := x.(*lane)
	head := &l.items[0]
	*h = append(*h, readyLane{due: head.due, seq: head.seq, lane: l})
}
func (h *laneHeap) Pop() any {
	old := *h
	l := old[len(old)-1].lane
	old[len(old)-1] = readyLane{}
	*h = old[:len(old)-1]
	return l
}
