package postgres

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/versioning"
)

// scanReceipt reads receiptColumns.
func scanReceipt(row pgx.Row) (*dedupe.Receipt, error) {
	var r dedupe.Receipt
	var decision, duplicate, state string
	var deliveries []byte
	var next, delivered *time.Time
	err := row.Scan(&r.Source, &r.RequestID, &r.Resource, &r.Version, &decision, &duplicate, &r.OrderingDecision,
		&r.LatestVersionAtDecision, &r.PayloadSHA256, &r.FirstSeen, &r.LastSeen, &r.Attempts, &deliveries,
		&state, &r.Forward.Attempts, &r.Forward.LastStatus, &r.Forward.LastError, &next, &delivered)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(deliveries, &r.Deliveries); err != nil {
		return nil, fmt.Errorf("receipt %s/%s: deliveries: %w", r.Source, r.RequestID, err)
	}
	r.Decision, r.DuplicateDecision, r.Forward.State = webhookd.Decision(decision), dedupe.Outcome(duplicate), webhookd.ForwardState(state)
	r.FirstSeen, r.LastSeen = r.FirstSeen.UTC(), r.LastSeen.UTC()
	r.Forward.NextAttemptAt, r.Forward.DeliveredAt = utc(next), utc(delivered)
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
	dest := append([]any{&seq, &e.Source, &e.RequestID, &e.Resource, &e.Version, &e.ContentType, &headers,
		&e.CreatedAt, &e.Attempts, &e.NextAttemptAt, &e.LastStatus, &e.LastError}, more...)
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
