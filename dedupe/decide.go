package dedupe

import (
	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/versioning"
)

// Plan is what a decision writes. A backend reads the held receipt and the
// resource's latest version, calls Decide, and writes the plan in one
// transaction: the receipt always, the latest version when Latest is set,
// and, when Enqueue is set, an outbox entry for each route the delivery
// names (webhookd.Delivery.Routes), sharing one payload.
type Plan struct {
	Outcome webhookd.Outcome
	Receipt *Receipt
	// Latest is the resource's new latest version, nil when it does not
	// change.
	Latest  *versioning.Latest
	Enqueue bool
}

// LatestFor names the resource whose latest version Decide needs for d,
// given the held receipt (nil when none): the held receipt's, for a
// redelivery, whose answer repeats it; d's, for a new versioned request.
// "" means none is needed.
func LatestFor(held *Receipt, d *webhookd.Delivery) string {
	switch {
	case held != nil:
		return held.Resource
	case d.Version != "":
		return d.Resource
	}
	return ""
}

// Decide plans the decision for d. held is the receipt of d's request ID,
// with its current forward status, or nil when none is held; latest is the
// latest version of the resource LatestFor names, or nil when it has none.
//
// A held request ID is a duplicate or a conflict, judged by the receipt
// it repeats, and only its receipt changes: one more delivery, and the
// TTL runs from it. A new request ID is stale when its version is not
// newer than the latest (older, when d's source accepts ties), and
// accepted otherwise; an accepted version, a tie included, becomes the
// latest, and an accepted delivery of a forwarding source is enqueued on
// each of its routes, pending on each.
func Decide(held *Receipt, latest *versioning.Latest, d *webhookd.Delivery) Plan {
	var out webhookd.Outcome
	if latest != nil {
		out.LatestVersion = latest.Version
	}
	if held != nil {
		r := *held
		r.Deliveries = append([]Delivery(nil), held.Deliveries...)
		out.Decision = webhookd.Conflict
		if Classify(held, d.Fingerprint) == Duplicate {
			out.Decision = webhookd.Duplicate
		}
		r.Record(Delivery{DeliveryID: d.DeliveryID, ReceivedAt: d.ReceivedAt, Decision: out.Decision})
		return Plan{Outcome: out, Receipt: &r}
	}

	ordering := versioning.Unordered
	if d.Resource != "" && d.Version != "" {
		ordering = versioning.Order(latest, d.VersionOrder, d.AcceptTies)
	}
	out.Decision = webhookd.Accepted
	if ordering == versioning.Stale {
		out.Decision = webhookd.Stale
	}
	r := &Receipt{
		Source:            d.Source,
		RequestID:         d.RequestID,
		Resource:          d.Resource,
		Version:           d.Version,
		Decision:          out.Decision,
		DuplicateDecision: New,
		OrderingDecision:  string(ordering),
		PayloadSHA256:     d.Fingerprint,
		FirstSeen:         d.ReceivedAt,
	}
	if latest != nil {
		r.LatestVersionAtDecision = latest.Version
	}
	r.Reason = Reason(ordering, d.Version, r.LatestVersionAtDecision)
	r.Record(Delivery{DeliveryID: d.DeliveryID, ReceivedAt: d.ReceivedAt, Decision: out.Decision})
	p := Plan{Outcome: out, Receipt: r}
	if out.Decision != webhookd.Accepted {
		return p
	}
	if ordering != versioning.Unordered {
		p.Latest = &versioning.Latest{Version: d.Version, Order: d.VersionOrder, RequestID: d.RequestID, UpdatedAt: d.ReceivedAt}
		p.Outcome.LatestVersion = d.Version
	}
	if d.Forward {
		r.Unrouted = len(d.Routes) == 0
		p.Enqueue = !r.Unrouted
		r.Routes = make([]webhookd.RouteStatus, len(d.Routes))
		for i, route := range d.Routes {
			r.Routes[i] = webhookd.RouteStatus{Route: route, ForwardStatus: webhookd.ForwardStatus{State: webhookd.ForwardPending}}
		}
	}
	return p
}

// Reason says why a new request ID was decided as it was. It is a function
// of the receipt's fields, so a backend need not store it.
func Reason(ordering versioning.Ordering, version, latest string) string {
	// Concatenated rather than formatted: this runs at every decision.
	const unseen = "request ID not seen before; "
	switch ordering {
	case versioning.First:
		return unseen + "first version " + version + " of the resource"
	case versioning.Newer:
		return unseen + "version " + version + " is newer than the latest accepted version " + latest
	case versioning.Tie:
		return unseen + "version " + version + " equals the latest accepted version " + latest + "; ties are accepted in arrival order"
	case versioning.Stale:
		return unseen + "version " + version + " is not newer than the latest accepted version " + latest + ", so it was recorded and not applied"
	}
	return unseen + "the source has no resource version to order by"
}
