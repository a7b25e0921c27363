package store

import (
	"context"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/versioning"
)

// Unordered is the ordering decision for deliveries without a version.
const Unordered versioning.Ordering = "unordered"

// decide combines the dedupe and ordering verdicts into the decision.
// ordering is only consulted for new request IDs: a redelivery is judged by
// the receipt it repeats.
func decide(dup dedupe.Outcome, ordering versioning.Ordering) webhookd.Decision {
	switch {
	case dup == dedupe.Duplicate:
		return webhookd.Duplicate
	case dup == dedupe.Conflict:
		return webhookd.Conflict
	case ordering == versioning.Stale:
		return webhookd.Stale
	default:
		return webhookd.Accepted
	}
}

// Decide makes the decision for d and writes it, with the receipt, the
// resource's latest version and the outbox entry, in one transaction. It
// returns once that transaction is synced to disk.
func (s *Store) Decide(ctx context.Context, d webhookd.Delivery) (webhookd.Outcome, error) {
	if err := s.space.refusal(); err != nil {
		return webhookd.Outcome{}, err
	}
	var out webhookd.Outcome
	err := s.update(func(t *tx) error {
		var err error
		out, err = s.stageDecision(t, d)
		return err
	})
	if err != nil {
		return webhookd.Outcome{}, fmt.Errorf("decide %s/%s: %w", d.Source, d.RequestID, err)
	}
	return out, nil
}

func (s *Store) stageDecision(t *tx, d webhookd.Delivery) (webhookd.Outcome, error) {
	rkey := receiptKey(d.Source, d.RequestID)
	var held dedupe.Receipt
	found, err := t.get(rkey, &held)
	if err != nil {
		return webhookd.Outcome{}, err
	}
	expiresAt := expiry(d.ReceivedAt, s.ReceiptTTL)

	if found {
		dup := dedupe.Classify(&held, d.Fingerprint)
		decision := decide(dup, "")
		held.Record(dedupe.Delivery{DeliveryID: d.DeliveryID, ReceivedAt: d.ReceivedAt, Decision: decision})
		if err := t.foldForward(&held); err != nil {
			return webhookd.Outcome{}, err
		}
		// A provider still retrying must still be recognised: the TTL runs from the last delivery.
		if err := t.set(rkey, &held, expiresAt); err != nil {
			return webhookd.Outcome{}, err
		}
		latest, err := s.latestOf(t, d.Source, held.Resource)
		return webhookd.Outcome{Decision: decision, LatestVersion: latest}, err
	}

	ordering := Unordered
	var latest versioning.Latest
	var hasLatest bool
	if d.Resource != "" && d.Version != "" {
		if latest, hasLatest, err = t.getLatest(d.Source, d.Resource); err != nil {
			return webhookd.Outcome{}, err
		}
		prev := &latest
		if !hasLatest {
			prev = nil
		}
		ordering = versioning.Order(prev, d.VersionOrder)
	}
	decision := decide(dedupe.New, ordering)

	r := &dedupe.Receipt{
		Source:            d.Source,
		RequestID:         d.RequestID,
		Resource:          d.Resource,
		Version:           d.Version,
		Decision:          decision,
		Reason:            reason(ordering, d.Version, latest.Version),
		DuplicateDecision: dedupe.New,
		OrderingDecision:  string(ordering),
		PayloadSHA256:     d.Fingerprint,
		FirstSeen:         d.ReceivedAt,
		Forward:           webhookd.ForwardStatus{State: webhookd.ForwardNone},
	}
	if hasLatest {
		r.LatestVersionAtDecision = latest.Version
	}
	r.Record(dedupe.Delivery{DeliveryID: d.DeliveryID, ReceivedAt: d.ReceivedAt, Decision: decision})

	out := webhookd.Outcome{Decision: decision}
	if hasLatest {
		out.LatestVersion = latest.Version
	}
	if decision == webhookd.Accepted {
		if ordering != Unordered {
			next := versioning.Latest{Version: d.Version, Order: d.VersionOrder, RequestID: d.RequestID, UpdatedAt: d.ReceivedAt}
			if err := t.setLatest(d.Source, d.Resource, next); err != nil {
				return webhookd.Outcome{}, err
			}
			out.LatestVersion = d.Version
		}
		if d.Forward {
			if err := s.stageOutbox(t, d, expiresAt); err != nil {
				return webhookd.Outcome{}, err
			}
			r.Forward.State = webhookd.ForwardPending
		}
	}
	if err := t.set(rkey, r, expiresAt); err != nil {
		return webhookd.Outcome{}, err
	}
	return out, nil
}

// stageOutbox writes the forward intent, its payload kept as long as the
// receipt for redelivery.
func (s *Store) stageOutbox(t *tx, d webhookd.Delivery, expiresAt uint64) error {
	e := forward.Entry{
		Source:        d.Source,
		RequestID:     d.RequestID,
		Resource:      d.Resource,
		Version:       d.Version,
		Body:          d.Body,
		ContentType:   d.ContentType,
		Headers:       d.Headers,
		CreatedAt:     d.ReceivedAt,
		NextAttemptAt: d.ReceivedAt,
	}
	return t.enqueue(&e, expiresAt)
}

// latestOf returns the latest accepted version of resource, or "".
func (s *Store) latestOf(t *tx, source, resource string) (string, error) {
	if resource == "" {
		return "", nil
	}
	l, _, err := t.getLatest(source, resource)
	return l.Version, err
}

func reason(ordering versioning.Ordering, version, latest string) string {
	// Concatenated rather than formatted: this runs at every decision, and
	// Sprintf cost 1 % of the CPU at intake.
	const unseen = "request ID not seen before; "
	switch ordering {
	case versioning.First:
		return unseen + "first version " + version + " of the resource"
	case versioning.Newer:
		return unseen + "version " + version + " is newer than the latest accepted version " + latest
	case versioning.Stale:
		return unseen + "version " + version + " is not newer than the latest accepted version " + latest + ", so it was recorded and not applied"
	}
	return unseen + "the source has no resource version to order by"
}

// expiry returns the Badger expiry (Unix seconds, rounded up) of a key
// written at t that lives for ttl.
func expiry(t time.Time, ttl time.Duration) uint64 {
	end := t.Add(ttl)
	secs := end.Unix()
	if end.Nanosecond() > 0 {
		secs++
	}
	return uint64(secs)
}

// Receipt returns the receipt of one request ID, with its current forward
// status.
func (s *Store) Receipt(ctx context.Context, source, requestID string) (*dedupe.Receipt, error) {
	var r dedupe.Receipt
	err := s.view(func(txn *badger.Txn) error {
		t := &tx{txn: txn}
		if err := t.mustGet(receiptKey(source, requestID), &r); err != nil {
			return err
		}
		_, err := t.forwardStatus(&r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("receipt %s/%s: %w", source, requestID, err)
	}
	return &r, nil
}

// Latest returns the latest accepted version of one resource.
func (s *Store) Latest(ctx context.Context, source, resource string) (*versioning.Latest, error) {
	var l versioning.Latest
	if err := s.getOne(latestKey(source, resource), &l); err != nil {
		return nil, fmt.Errorf("latest %s/%s: %w", source, resource, err)
	}
	return &l, nil
}

func (s *Store) getOne(key []byte, v any) error {
	return s.view(func(txn *badger.Txn) error { return (&tx{txn: txn}).mustGet(key, v) })
}

// mustGet decodes the JSON value at key into v, or says it is not found.
func (t *tx) mustGet(key []byte, v any) error {
	found, err := t.get(key, v)
	if err == nil && !found {
		err = webhookd.Errorf(webhookd.ENOTFOUND, "not found")
	}
	return err
}

// forwardRecord is a forward key's value: the status, and the first_seen
// of the receipt it belongs to, which the key names too. A legacy key
// (legacyForwardKey) may hold an earlier receipt's status under the same
// request ID, and the stamp tells; keys written before the stamp expired
// with their receipt, so a zero stamp belongs to the receipt there is.
type forwardRecord struct {
	webhookd.ForwardStatus
	ReceiptFirstSeen time.Time `json:"receipt_first_seen,omitzero"`
}

// forwardStatus sets r.Forward to the request's current forward status: the
// forward key's when the status changed after the decision, else the
// receipt's own. It returns the key it took the status from, or nil.
func (t *tx) forwardStatus(r *dedupe.Receipt) (key []byte, err error) {
	if r.Forward.State == webhookd.ForwardNone {
		return nil, nil // never forwarded, so never settled: no key to read
	}
	for _, k := range [][]byte{forwardKey(r.Source, r.RequestID, r.FirstSeen), legacyForwardKey(r.Source, r.RequestID)} {
		var f forwardRecord
		held, err := t.get(k, &f)
		if err != nil {
			return nil, err
		}
		if held && (f.ReceiptFirstSeen.IsZero() || f.ReceiptFirstSeen.Equal(r.FirstSeen)) {
			r.Forward = f.ForwardStatus
			return k, nil
		}
	}
	return nil, nil
}

// foldForward moves the forward key's status into r, which the caller is
// about to write: the key would otherwise expire before the receipt whose
// TTL a redelivery extends.
func (t *tx) foldForward(r *dedupe.Receipt) error {
	key, err := t.forwardStatus(r)
	if key != nil {
		t.delete(key)
	}
	return err
}
