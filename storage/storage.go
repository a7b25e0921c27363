// Package storage is webhookd's storage contract: the one interface every
// backend satisfies (store for Badger in one process, postgres for
// replicas sharing a database), so that the gateway, the admin API, the
// console and the forwarder work the same on either, and the conformance
// suite (store/storetest) checks both against it.
//
// Consumers keep smaller interfaces where they use them (gateway.Decider,
// forward.Queue); this package declares the whole of it once.
package storage

import (
	"context"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/versioning"
)

// Backend is where webhookd keeps receipts, latest versions, the outbox
// and dead letters.
type Backend interface {
	// Decide makes, records and returns the decision for one delivery:
	// it reads the receipt and the resource's latest version, plans with
	// dedupe.Decide, and writes the receipt, the latest version and, for
	// an accepted delivery that is forwarded, one outbox entry for each
	// route it names, sharing one payload, in one transaction. It returns only once that transaction
	// is durable; when it fails, nothing of it is written, and the error
	// is a webhookd.Error (EUNAVAILABLE when the storage cannot write).
	// Deliveries of one request ID decided concurrently give one
	// accepted, and a resource's latest version never moves backwards.
	Decide(ctx context.Context, d webhookd.Delivery) (webhookd.Outcome, error)
	// Ready is nil when Decide may succeed: the backend is open, has not
	// failed, and can write (room on its disk, its database answering).
	// Readiness probes and the console ask it; it does no writing.
	Ready() error
	// Failed is closed when the backend takes nothing more until
	// webhookd starts again, for its supervisor to restart it: a backend
	// that may answer from writes the disk does not hold (Badger after a
	// failed commit) closes it. A backend whose failed writes leave
	// nothing behind never closes it.
	Failed() <-chan struct{}

	Records
	forward.Queue
	forward.Control
	// DeadLetterCounts returns how many dead letters each route has; a
	// route without any is absent. Metrics read it on every scrape.
	DeadLetterCounts() (map[forward.Target]int, error)

	// Close releases the backend once nothing uses it any more: intake
	// and the forwarder are shut down first.
	Close() error
}

// Records is what the admin API and the console read and repair. Errors
// are webhookd.Errors: ENOTFOUND for what is not there, ECONFLICT for a
// repair its record's state does not allow.
type Records interface {
	// Receipt returns the receipt of one request ID, with its current
	// forward status, until it expires (receipt_ttl from its last
	// delivery).
	Receipt(ctx context.Context, source, requestID string) (*dedupe.Receipt, error)
	// Latest returns the latest accepted version of one resource. Latest
	// versions do not expire.
	Latest(ctx context.Context, source, resource string) (*versioning.Latest, error)
	// Receipts returns a page of the receipts q selects, newest first
	// (by first seen, then source, then request ID, each descending), and
	// the cursor of the next page, "" after the last. Receipts that arrive
	// while an operator pages are newer than the cursor: no page repeats
	// or skips one. A backend reads an index by time, never every receipt; a page
	// may come back short, or empty with a cursor, when the filters
	// discard much of what the index holds (see MaxExamined).
	Receipts(ctx context.Context, q ReceiptQuery) (items []dedupe.Receipt, next string, err error)
	// Outbox returns a page of the entries waiting to be forwarded to
	// target, in outbox order and without their bodies, and the cursor of
	// the next page. An empty Route means every route of the source; an
	// empty Source, every source. A backend that reads the outbox in its
	// order, not by target, reads at most MaxExamined entries a page: a
	// page of a target among many others' may come back short, or empty
	// with a cursor.
	Outbox(ctx context.Context, target forward.Target, page Page) (items []forward.Entry, next string, err error)
	// DeadLetters returns a page of the dead letters of target (empty
	// fields as in Outbox), by source, route and request ID, without their
	// bodies.
	DeadLetters(ctx context.Context, target forward.Target, page Page) (items []forward.Entry, next string, err error)
	// RetryDeadLetter puts a dead letter of target back at the end of the
	// outbox, with its attempts reset, if its body is kept and no later
	// version of its resource was accepted.
	RetryDeadLetter(ctx context.Context, target forward.Target, requestID string) error
	// DiscardDeadLetter removes a dead letter of target for good; its
	// receipt says it was discarded on that route.
	DiscardDeadLetter(ctx context.Context, target forward.Target, requestID string) error
	// Redeliver forwards an accepted request again to route, from its kept
	// payload, once its forwarding there has ended (forward.CanRedeliver)
	// and if no later version of its resource was accepted. An empty route
	// means every route forward.Redeliverable allows, in one transaction.
	Redeliver(ctx context.Context, source, requestID, route string) error
	// RetryDeadLetters retries, as RetryDeadLetter does, the dead letters
	// q selects, a page at a time, oldest first (by when they were
	// accepted, so each resource's versions go back into the outbox in
	// order); each page is one transaction. Those RetryDeadLetter would
	// refuse stay, counted as Refused. Next continues after the page.
	RetryDeadLetters(ctx context.Context, q DeadLetterQuery, page Page) (BulkResult, error)
	// DiscardDeadLetters discards the dead letters q selects, as
	// RetryDeadLetters pages them.
	DiscardDeadLetters(ctx context.Context, q DeadLetterQuery, page Page) (BulkResult, error)
}

// Page asks for one page of a list: at most Limit items (0 for
// DefaultLimit, at most MaxLimit) after Cursor, "" for the first page.
// Cursors are opaque, and a backend's own: a bad one is EINVALID.
type Page struct {
	Limit  int
	Cursor string
}

// Page sizes.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
	// MaxExamined bounds the index entries one page of Receipts reads,
	// and the entries one page of Outbox reads from an outbox in its order.
	MaxExamined = 10 * MaxLimit
)

// Size returns the page's limit within bounds.
func (p Page) Size() int {
	if p.Limit <= 0 {
		return DefaultLimit
	}
	return min(p.Limit, MaxLimit)
}

// ReceiptQuery selects receipts; a zero field selects every value.
type ReceiptQuery struct {
	Source   string
	Decision webhookd.Decision
	Resource string // of Source
	// Route selects receipts forwarded to that route of Source;
	// ForwardState, receipts with a route (Route, when set) in that state.
	Route        string
	ForwardState webhookd.ForwardState
	// Since and Until bound when the receipt was first seen: Since <=
	// first seen < Until.
	Since, Until time.Time
	Page
}

// DeadLetterQuery selects dead letters: those of Target (empty fields as
// in Records.Outbox) that died in [Since, Until), a zero bound being none.
type DeadLetterQuery struct {
	Target       forward.Target
	Since, Until time.Time
}

// BulkResult counts what one page of a bulk repair did.
type BulkResult struct {
	Done    int    `json:"done"`
	Refused int    `json:"refused"`
	Next    string `json:"-"` // "" after the last page
}
