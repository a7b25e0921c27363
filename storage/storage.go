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
	// Outbox returns the entries waiting to be forwarded to target, in
	// outbox order and without their bodies. An empty Route means every
	// route of the source; an empty Source, every source.
	Outbox(ctx context.Context, target forward.Target) ([]forward.Entry, error)
	// DeadLetters returns the dead letters of target (empty fields as in
	// Outbox), by source, route and request ID, without their bodies.
	DeadLetters(ctx context.Context, target forward.Target) ([]forward.Entry, error)
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
}
