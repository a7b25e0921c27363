package forward

import (
	"context"
	"errors"
	"time"
)

// ErrLeaseLost is Settle's answer when the claim is no longer its
// owner's: its lease ended and another owner claimed the entry, or settled
// it.
var ErrLeaseLost = errors.New("lease lost: the entry was claimed by another owner")

// Queue is the outbox as forwarders see it, in one process or many.
//
// Entries of one (source, route, resource) form a lane, in the order they
// were accepted, which is their version order; an entry without a
// resource is a lane of its own. Only a lane's head is ever claimed, and the next entry
// only once the head is settled, so entries of one resource go one at a
// time and in order, whichever owner sends them.
type Queue interface {
	// Claim hands owner up to n of target's lane heads that are due and
	// not claimed, each for lease: until then no other owner gets it. A
	// claim whose owner died is claimable again after its lease.
	Claim(ctx context.Context, owner string, target Target, n int, lease time.Duration) ([]Claim, error)
	// Settle records what became of a claimed entry, with its receipt's
	// forward status, atomically, if the claim still holds: its token is
	// the entry's latest. Settling a claim again records nothing more and
	// succeeds. It returns ErrLeaseLost when another claim took the entry.
	Settle(ctx context.Context, c Claim, r Result) error
	// Pending returns how many entries wait to be forwarded, by target; a
	// target with none is absent.
	Pending(ctx context.Context) (map[Target]int, error)
	// Notify is signalled when entries may have become claimable in this
	// process. It is a hint: claims that only a poll finds are correct too.
	Notify() <-chan struct{}
}

// Claim is one entry handed to one owner until Until.
type Claim struct {
	// Entry comes with its Body; Body is nil when its payload expired
	// (receipt_ttl) before it could be sent, and the entry is then
	// dead-lettered, as nothing can be sent.
	Entry
	Owner string
	Token uint64
	Until time.Time
	// Newer says a later entry waits in the lane: a source that supersedes
	// skips this one.
	Newer bool
}
