package postgres

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/versioning"
)

// routeStatus is one route's forward status as the receipts' routes
// column holds it, under the route's name.
type routeStatus struct {
	// Position is the route's place in the source's route order, which
	// receipts list their routes in.
	Position int `json:"position"`
	webhookd.ForwardStatus
	// Token is the lease token of the claim whose settle wrote the
	// status; absent when no settle did.
	Token *int64 `json:"token,omitempty"`
}

// settledStatus is the object a settle merges over its route's status
// (setRouteStatuses): every field but the position, those unset as null, so
// that it replaces all of the status before it. Its times keep
// microseconds, as the timestamptz columns do, so that a retrying status
// names the time its entry is due at.
func settledStatus(st webhookd.ForwardStatus, token int64) ([]byte, error) {
	return json.Marshal(map[string]any{
		"state": st.State, "attempts": st.Attempts, "last_status": st.LastStatus, "last_error": st.LastError,
		"next_attempt_at": micro(st.NextAttemptAt), "delivered_at": micro(st.DeliveredAt), "token": token,
	})
}

func micro(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.Truncate(time.Microsecond)
	return &u
}

// routesJSON is an object of the routes column: the statuses of the
// routes named in only (every route when only is nil), each at its place
// in statuses, with no token.
func routesJSON(statuses []webhookd.RouteStatus, only []string) string {
	m := make(map[string]routeStatus, len(statuses))
	for i, rs := range statuses {
		if only == nil || slices.Contains(only, rs.Route) {
			m[rs.Route] = routeStatus{Position: i, ForwardStatus: rs.ForwardStatus}
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// decodeRoutes reads the routes column into r.Routes, in route order.
func decodeRoutes(b []byte, r *dedupe.Receipt) error {
	var m map[string]routeStatus
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("receipt %s/%s: routes: %w", r.Source, r.RequestID, err)
	}
	if len(m) == 0 {
		return nil
	}
	r.Routes = make([]webhookd.RouteStatus, 0, len(m))
	for _, route := range slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Compare(m[a].Position, m[b].Position) }) {
		st := m[route].ForwardStatus
		st.NextAttemptAt, st.DeliveredAt = utc(st.NextAttemptAt), utc(st.DeliveredAt)
		r.Routes = append(r.Routes, webhookd.RouteStatus{Route: route, ForwardStatus: st})
	}
	return nil
}

// scanReceipt reads receiptColumns, then what follows into more.
func scanReceipt(row pgx.Row, more ...any) (*dedupe.Receipt, error) {
	var r dedupe.Receipt
	var decision, duplicate string
	var deliveries, routes []byte
	err := row.Scan(append([]any{&r.Source, &r.RequestID, &r.Resource, &r.Version, &decision, &duplicate,
		&r.OrderingDecision, &r.LatestVersionAtDecision, &r.PayloadSHA256, &r.FirstSeen, &r.LastSeen, &r.Attempts,
		&deliveries, &r.Unrouted, &routes}, more...)...)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(deliveries, &r.Deliveries); err != nil {
		return nil, fmt.Errorf("receipt %s/%s: deliveries: %w", r.Source, r.RequestID, err)
	}
	if err := decodeRoutes(routes, &r); err != nil {
		return nil, err
	}
	r.Decision, r.DuplicateDecision = webhookd.Decision(decision), dedupe.Outcome(duplicate)
	r.FirstSeen, r.LastSeen = r.FirstSeen.UTC(), r.LastSeen.UTC()
	for i := range r.Deliveries {
		r.Deliveries[i].ReceivedAt = r.Deliveries[i].ReceivedAt.UTC()
	}
	r.Reason = dedupe.Reason(versioning.Ordering(r.OrderingDecision), r.Version, r.LatestVersionAtDecision)
	return &r, nil
}

// scanLatest reads source, resource, version, ord, request_id, updated_at.
func scanLatest(row pgx.Row, source, resource *string) (*versioning.Latest, error) {
	var l versioning.Latest
	var o int64
	if err := row.Scan(source, resource, &l.Version, &o, &l.RequestID, &l.UpdatedAt); err != nil {
		return nil, err
	}
	l.Order, l.UpdatedAt = unord(o), l.UpdatedAt.UTC()
	return &l, nil
}

// scanEntry reads seq and entryColumns.
func scanEntry(row pgx.Row, more ...any) (forward.Entry, error) {
	var e forward.Entry
	var seq int64
	var headers []byte
	dest := append([]any{&seq, &e.Source, &e.Route, &e.RequestID, &e.Resource, &e.Version, &e.ContentType, &headers,
		&e.Trace, &e.CreatedAt, &e.Attempts, &e.NextAttemptAt, &e.LastStatus, &e.LastError}, more...)
	if err := row.Scan(dest...); err != nil {
		return e, err
	}
	e.Seq = uint64(seq)
	e.CreatedAt, e.NextAttemptAt = e.CreatedAt.UTC(), e.NextAttemptAt.UTC()
	return e, decodeHeaders(headers, &e)
}

func decodeHeaders(b []byte, e *forward.Entry) error {
	if err := json.Unmarshal(b, &e.Headers); err != nil {
		return fmt.Errorf("entry %s/%s: headers: %w", e.Source, e.RequestID, err)
	}
	return nil
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
