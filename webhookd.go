// Package webhookd holds the vocabulary every other package shares: the
// decisions made about a delivery, the delivery itself as the gateway hands it
// to the store, the forward status a receipt carries, and the one error type.
//
// It imports nothing from this module, so every package may import it.
package webhookd

import "time"

// Decision is what webhookd decided about one delivery.
type Decision string

const (
	// Accepted is new work: an unseen request ID whose version, if any, is
	// newer than the resource's latest accepted version (or equal to it,
	// where the source accepts ties).
	Accepted Decision = "accepted"
	// Duplicate is a redelivery of a request ID already held, same payload.
	Duplicate Decision = "duplicate"
	// Stale is a new request ID whose version is not newer than the latest
	// (or, where the source accepts ties, older than it).
	Stale Decision = "stale"
	// Conflict is a known request ID arriving with a different payload.
	Conflict Decision = "conflict"
)

// Delivery is one incoming webhook, parsed and validated by the gateway.
//
// Body and Headers are read only during Store.Decide; the caller may reuse
// their memory once Decide returns.
type Delivery struct {
	Source     string
	RequestID  string
	DeliveryID string
	Resource   string // empty when the source has no resource selector
	Version    string // as the sender gave it; empty when the source has no version
	// VersionOrder orders versions of one resource; meaningful only when
	// Version is set.
	VersionOrder uint64
	Fingerprint  string // hex SHA-256 of the payload, see dedupe.Fingerprint
	ReceivedAt   time.Time

	// AcceptTies is set when the source accepts a version equal to the
	// resource's latest accepted one (versioning.TiesAccept).
	AcceptTies bool

	// Forward is set when the source has routes: an accepted delivery is
	// then forwarded to each route Routes names, in that order, and the
	// store writes one outbox entry a route, sharing the body and headers
	// below. An accepted delivery of a forwarding source that Routes
	// leaves empty matched no route's filter: it is recorded as routed
	// nowhere.
	Forward     bool
	Routes      []string
	Body        []byte
	ContentType string
	Headers     map[string]string // pass-through headers for the downstream
	// Trace is the W3C traceparent of the span that accepted the delivery,
	// empty when tracing is off: its entries keep it, so that every forward
	// attempt, on any replica, is a span of that trace.
	Trace string
}

// Outcome is the answer to one delivery.
type Outcome struct {
	Decision Decision
	// LatestVersion is the resource's latest accepted version after the
	// decision, as its sender gave it; empty when the resource has none.
	LatestVersion string
}

// ForwardState is where a receipt's forward intent stands.
type ForwardState string

const (
	ForwardPending    ForwardState = "pending"
	ForwardRetrying   ForwardState = "retrying"
	ForwardDelivered  ForwardState = "delivered"
	ForwardDead       ForwardState = "dead"
	ForwardDiscarded  ForwardState = "discarded"
	ForwardSuperseded ForwardState = "superseded"
)

// ForwardStatus is the side effect that followed an accepted delivery on
// one route, as its receipt records it.
type ForwardStatus struct {
	State         ForwardState `json:"state"`
	Attempts      int          `json:"attempts"`
	LastStatus    int          `json:"last_status,omitempty"`
	LastError     string       `json:"last_error,omitempty"`
	NextAttemptAt *time.Time   `json:"next_attempt_at,omitempty"`
	DeliveredAt   *time.Time   `json:"delivered_at,omitempty"`
}

// RouteStatus is the forward status of one route of a receipt.
type RouteStatus struct {
	Route string `json:"route"`
	ForwardStatus
}
