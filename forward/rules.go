package forward

import (
	"cmp"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/versioning"
)

// NewEntry is the outbox entry of an accepted delivery for one of its
// routes, due at once.
func NewEntry(d *webhookd.Delivery, route string) Entry {
	return Entry{
		Source:        d.Source,
		Route:         route,
		RequestID:     d.RequestID,
		Resource:      d.Resource,
		Version:       d.Version,
		Body:          d.Body,
		ContentType:   d.ContentType,
		Trace:         d.Trace,
		Headers:       d.Headers,
		CreatedAt:     d.ReceivedAt,
		NextAttemptAt: d.ReceivedAt,
	}
}

// Move is where a settled entry goes.
type Move int

const (
	Remove     Move = iota // delivered or superseded: the entry leaves the outbox
	Reschedule             // retrying: the entry stays, due at its next attempt
	Bury                   // dead: the entry moves to the dead letters, with its body
)

// Effect is what one result does to its entry and to its receipt.
type Effect struct {
	Move Move
	// Entry is the entry as it stays (Reschedule) or as a dead letter
	// (Bury).
	Entry Entry
	// Status is the receipt's forward status from now on.
	Status webhookd.ForwardStatus
}

// Apply returns the effect of r on e, whose Body is the body sent (nil
// when its payload expired before it could be).
func Apply(e Entry, r Result) Effect {
	status := webhookd.ForwardStatus{State: r.State, Attempts: r.Attempts, LastStatus: r.Status, LastError: r.Error}
	e.Attempts, e.LastStatus, e.LastError = r.Attempts, r.Status, r.Error
	switch r.State {
	case webhookd.ForwardRetrying:
		e.NextAttemptAt, e.Body = r.NextAttemptAt, nil
		status.NextAttemptAt = &r.NextAttemptAt
		return Effect{Move: Reschedule, Entry: e, Status: status}
	case webhookd.ForwardDead:
		e.DeadAt, e.BodyLost = &r.At, e.Body == nil
		return Effect{Move: Bury, Entry: e, Status: status}
	case webhookd.ForwardDelivered:
		status.DeliveredAt = &r.At
	}
	return Effect{Move: Remove, Status: status}
}

// Requeue returns e as a fresh forward intent due at now, and the forward
// status its receipt then has.
func Requeue(e Entry, now time.Time) (Entry, webhookd.ForwardStatus) {
	e.Attempts, e.LastStatus, e.LastError, e.DeadAt, e.BodyLost = 0, 0, "", nil, false
	e.NextAttemptAt = now
	return e, webhookd.ForwardStatus{State: webhookd.ForwardPending}
}

// CanRedeliver says whether the request of receipt r may be forwarded
// again to route, given its forward status there. The backend then needs
// its payload, and CanResend. The console offers Redeliver only where it
// allows it.
func CanRedeliver(r *dedupe.Receipt, route string) error {
	if r.Decision != webhookd.Accepted {
		return webhookd.Errorf(webhookd.ECONFLICT, "request was decided %s, not accepted: there is nothing to redeliver", r.Decision)
	}
	rs := r.Route(route)
	switch {
	case rs == nil:
		return webhookd.Errorf(webhookd.ENOTFOUND, "request was not forwarded to route %q: there is nothing to redeliver", route)
	case rs.State == webhookd.ForwardPending || rs.State == webhookd.ForwardRetrying:
		return webhookd.Errorf(webhookd.ECONFLICT, "request is already queued for route %s (%s)", route, rs.State)
	case rs.State == webhookd.ForwardDead:
		return webhookd.Errorf(webhookd.ECONFLICT, "request is a dead letter of route %s: retry it with POST /admin/deadletters/%s/%s/%s/retry", route, r.Source, route, r.RequestID)
	}
	return nil
}

// RedeliverTo returns the routes a redelivery of r to route requeues:
// route itself, when CanRedeliver allows it, or, when route is "", every
// route Redeliverable allows.
func RedeliverTo(r *dedupe.Receipt, route string) ([]string, error) {
	if route == "" {
		return Redeliverable(r)
	}
	if err := CanRedeliver(r, route); err != nil {
		return nil, err
	}
	return []string{route}, nil
}

// Redeliverable returns the routes of receipt r that CanRedeliver allows,
// for a redelivery that names no route; when none does, err says why not
// for the first.
func Redeliverable(r *dedupe.Receipt) (routes []string, err error) {
	switch {
	case r.Decision != webhookd.Accepted:
		return nil, CanRedeliver(r, "")
	case len(r.Routes) == 0:
		return nil, webhookd.Errorf(webhookd.ECONFLICT, "the request was not forwarded to any route: there is nothing to redeliver")
	}
	for _, rs := range r.Routes {
		if e := CanRedeliver(r, rs.Route); e != nil {
			err = cmp.Or(err, e)
			continue
		}
		routes = append(routes, rs.Route)
	}
	if len(routes) > 0 {
		return routes, nil
	}
	return nil, err
}

// ErrNoPayload is CanRedeliver's sequel when the backend holds no payload
// for the request.
var ErrNoPayload = webhookd.Errorf(webhookd.ECONFLICT, "the source did not forward this request, or its payload is no longer held")

// CanRetry says whether dead letter e may go back into the outbox. held is
// the receipt its request ID has now, nil when none.
func CanRetry(e *Entry, held *dedupe.Receipt) error {
	if e.BodyLost {
		return webhookd.Errorf(webhookd.ECONFLICT, "the payload of %s/%s expired before it was forwarded: there is nothing to send", e.Source, e.RequestID)
	}
	// A dead letter outlives its receipt. Once the request ID came back
	// under a new receipt, that request is forwarded on its own, and this
	// one would take its payload and status.
	if held != nil && !held.FirstSeen.Equal(e.CreatedAt) {
		return webhookd.Errorf(webhookd.ECONFLICT, "%s/%s was received again after this dead letter's receipt expired, and is forwarded as that new request: discard this dead letter", e.Source, e.RequestID)
	}
	return nil
}

// CanResend refuses to send e again once a newer version of its resource
// was accepted: the downstream would get an older version after a newer
// one. latest is the resource's latest version, nil when none.
func CanResend(e *Entry, latest *versioning.Latest) error {
	if e.Resource == "" || e.Version == "" || latest == nil || latest.RequestID == e.RequestID {
		return nil
	}
	return webhookd.Errorf(webhookd.ECONFLICT, "version %s of resource %s was accepted after this request's version %s: sending it now would deliver an older version after a newer one", latest.Version, e.Resource, e.Version)
}

// Discarded returns the forward status of e's route on held, the receipt
// its request ID has now (nil when none), once dead letter e is
// discarded; ok is false when the receipt is not e's (none, or a later
// one) or was not forwarded to its route, so there is no status to change.
func Discarded(e *Entry, held *dedupe.Receipt) (status webhookd.ForwardStatus, ok bool) {
	if held == nil || !held.FirstSeen.Equal(e.CreatedAt) {
		return status, false
	}
	rs := held.Route(e.Route)
	if rs == nil {
		return status, false
	}
	status = rs.ForwardStatus
	status.State, status.NextAttemptAt = webhookd.ForwardDiscarded, nil
	return status, true
}
