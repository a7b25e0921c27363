package dedupe

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/tidwall/sjson"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/versioning"
)

// Outcome is what the dedupe rule says about a request ID.
type Outcome string

const (
	New       Outcome = "new"
	Duplicate Outcome = "duplicate"
	Conflict  Outcome = "conflict"
)

// Classify applies the dedupe rule. held is nil when the request ID is not
// remembered.
func Classify(held *Receipt, fingerprint string) Outcome {
	switch {
	case held == nil:
		return New
	case held.PayloadSHA256 == fingerprint:
		return Duplicate
	default:
		return Conflict
	}
}

// Fingerprint returns the hex SHA-256 of body, or of the JSON body with the
// exclude paths (gjson/sjson dotted paths) removed, so that fields a provider
// changes on every retry, such as a send time, do not make a retry look like
// another payload.
func Fingerprint(body []byte, exclude []string) (string, error) {
	for _, path := range exclude {
		var err error
		if body, err = sjson.DeleteBytes(body, path); err != nil {
			return "", fmt.Errorf("fingerprint: exclude %q: %w", path, err)
		}
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// MaxDeliveries bounds the deliveries a receipt lists; Attempts keeps
// counting past it. A provider that retries for days must not grow a receipt
// without bound.
const MaxDeliveries = 32

// Delivery is one arrival of a request ID.
type Delivery struct {
	DeliveryID string            `json:"delivery_id"`
	ReceivedAt time.Time         `json:"received_at"`
	Decision   webhookd.Decision `json:"decision"`
}

// Receipt is the evidence record of one request ID: which key and entity it
// concerned, every arrival, what was decided about duplication and ordering
// and why, and what side effect followed.
type Receipt struct {
	Source    string            `json:"source"`
	RequestID string            `json:"request_id"`
	Resource  string            `json:"resource,omitempty"`
	Version   string            `json:"version,omitempty"`
	Decision  webhookd.Decision `json:"decision"`
	Reason    string            `json:"reason"`
	// DuplicateDecision is the dedupe rule's verdict on the first arrival;
	// later arrivals carry theirs in Deliveries.
	DuplicateDecision       Outcome `json:"duplicate_decision"`
	OrderingDecision        string  `json:"ordering_decision"`
	LatestVersionAtDecision string  `json:"latest_version_at_decision,omitempty"`
	PayloadSHA256           string  `json:"payload_sha256"`

	FirstSeen  time.Time  `json:"first_seen"`
	LastSeen   time.Time  `json:"last_seen"`
	Attempts   int        `json:"attempts"`
	Deliveries []Delivery `json:"deliveries"`

	// Routes is the forward status of each route the request was
	// forwarded to, in the source's route order; empty when it was not
	// forwarded: not accepted, the source has no routes, or (Unrouted) it
	// matched no route's filter.
	Routes   []webhookd.RouteStatus `json:"routes,omitempty"`
	Unrouted bool                   `json:"unrouted,omitempty"`
}

// Route returns the forward status of route, or nil when the request was
// not forwarded to it.
func (r *Receipt) Route(route string) *webhookd.RouteStatus {
	for i := range r.Routes {
		if r.Routes[i].Route == route {
			return &r.Routes[i]
		}
	}
	return nil
}

// Record adds one arrival. When the list is full the oldest arrival after
// the first is dropped: the first shows how the request began, the latest
// show what the provider does now.
func (r *Receipt) Record(d Delivery) {
	r.Attempts++
	r.LastSeen = d.ReceivedAt
	if len(r.Deliveries) >= MaxDeliveries {
		r.Deliveries = append(r.Deliveries[:1], r.Deliveries[2:]...)
	}
	r.Deliveries = append(r.Deliveries, d)
}

// routeRisk says what forwarding to one route does not guarantee, given
// where it stands.
func routeRisk(rs *webhookd.RouteStatus) string {
	prefix := "route " + rs.Route + ": "
	switch rs.State {
	case webhookd.ForwardDead:
		return prefix + "forwarding gave up (a dead letter): the downstream may not have applied it; retry or discard the dead letter"
	case webhookd.ForwardDiscarded:
		return prefix + "the dead letter was discarded: the downstream may never have received it"
	case webhookd.ForwardSuperseded:
		return prefix + "not sent: a newer version of the resource was pending for this route, and only the newest is sent"
	}
	return prefix + "forwarding is at least once: the downstream may receive this request more than once and must deduplicate on the Idempotency-Key header (the request ID)"
}

// ResidualRisk says what the receipt's decision does not guarantee, so that
// an operator reading it knows what is left to the sender or the downstream.
func (r *Receipt) ResidualRisk() []string {
	risks := []string{
		"request IDs are remembered for receipt_ttl after the last delivery; a redelivery after that is decided as new work",
	}
	switch {
	case r.Decision == webhookd.Accepted && len(r.Routes) > 0:
		for _, rs := range r.Routes {
			risks = append(risks, routeRisk(&rs))
		}
	case r.Decision == webhookd.Accepted && r.Unrouted:
		risks = append(risks, "the delivery matched no route's filter: webhookd recorded the decision and forwarded it nowhere")
	case r.Decision == webhookd.Accepted:
		risks = append(risks, "the source has no routes: webhookd recorded the decision and nothing else acted on it")
	case r.Decision == webhookd.Stale:
		risks = append(risks, "the payload was not applied: if the newer version it lost to was itself wrong, the sender must send a newer version")
	}
	if r.OrderingDecision == string(versioning.Tie) {
		risks = append(risks, "the version equals the one accepted before it: the two are ordered by arrival, which need not be the order the sender made the changes in")
	}
	if r.Resource == "" {
		risks = append(risks, "no resource version: updates to one entity are not checked for order")
	}
	return risks
}
