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

// Decide makes the decision for d and writes it, with the receipt, the
// resource's latest version and an outbox entry for each of d's routes, in
// one transaction. It returns once that transaction is synced to disk.
func (s *Store) Decide(ctx context.Context, d webhookd.Delivery) (webhookd.Outcome, error) {
	if err := s.space.refusal(); err != nil {
		return webhookd.Outcome{}, err
	}
	var out webhookd.Outcome
	err := s.update(func(t *tx) error {
		var err error
		out, err = s.stageDecision(t, &d)
		return err
	})
	if err != nil {
		return webhookd.Outcome{}, fmt.Errorf("decide %s/%s: %w", d.Source, d.RequestID, err)
	}
	return out, nil
}

// stageDecision reads what the decision depends on, plans it
// (dedupe.Decide), and stages what the plan writes.
func (s *Store) stageDecision(t *tx, d *webhookd.Delivery) (webhookd.Outcome, error) {
	rkey := receiptKey(d.Source, d.RequestID)
	var held *dedupe.Receipt
	var r dedupe.Receipt
	found, err := t.get(rkey, &r)
	if err != nil {
		return webhookd.Outcome{}, err
	}
	if found {
		// The receipt is rewritten: the forward keys would otherwise
		// expire before the receipt whose TTL a redelivery extends.
		if err := t.foldForward(&r); err != nil {
			return webhookd.Outcome{}, err
		}
		held = &r
	}
	var latest *versioning.Latest
	var l versioning.Latest
	if resource := dedupe.LatestFor(held, d); resource != "" {
		if l, found, err = t.getLatest(d.Source, resource); err != nil {
			return webhookd.Outcome{}, err
		}
		if found {
			latest = &l
		}
	}

	p := dedupe.Decide(held, latest, d)

	expiresAt := expiry(d.ReceivedAt, s.ReceiptTTL)
	if err := t.set(rkey, p.Receipt, expiresAt); err != nil {
		return webhookd.Outcome{}, err
	}
	// The index keys live as long as the receipt: a redelivery, which
	// extends the receipt, writes them again.
	pos := receiptPos{firstSeen: p.Receipt.FirstSeen, source: d.Source, requestID: d.RequestID}
	t.setRaw(byTimeKey(pos), indexValue(p.Receipt.Routes), expiresAt)
	t.setRaw(bySourceKey(pos), nil, expiresAt)
	if p.Latest != nil {
		if err := t.setLatest(d.Source, d.Resource, *p.Latest); err != nil {
			return webhookd.Outcome{}, err
		}
	}
	if p.Enqueue {
		e := forward.NewEntry(d, "")
		t.enqueue(&e, d.Routes, expiresAt)
	}
	return p.Outcome, nil
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

// Receipt returns the receipt of one request ID, with the current forward
// status of each route.
func (s *Store) Receipt(ctx context.Context, source, requestID string) (*dedupe.Receipt, error) {
	var r dedupe.Receipt
	err := s.view(func(txn *badger.Txn) error {
		t := s.reader(txn)
		if err := t.mustGet(receiptKey(source, requestID), &r); err != nil {
			return err
		}
		_, err := t.forwardStatuses(&r)
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
	return s.view(func(txn *badger.Txn) error { return s.reader(txn).mustGet(key, v) })
}

// mustGet decodes the value at key into v, or says it is not found.
func (t *tx) mustGet(key []byte, v any) error {
	found, err := t.get(key, v)
	if err == nil && !found {
		err = webhookd.Errorf(webhookd.ENOTFOUND, "not found")
	}
	return err
}

// forwardStatuses sets each of r's routes to its current forward status:
// its forward key's when the status changed after the decision, else the
// receipt's own. It returns the keys it took statuses from.
func (t *tx) forwardStatuses(r *dedupe.Receipt) (keys [][]byte, err error) {
	for i := range r.Routes {
		rs := &r.Routes[i]
		k := forwardKey(r.Source, r.RequestID, r.FirstSeen, rs.Route)
		var f webhookd.ForwardStatus
		held, err := t.get(k, &f)
		if err != nil {
			return nil, err
		}
		if held {
			rs.ForwardStatus = f
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// foldForward moves the forward keys' statuses into r, which the caller is
// about to write.
func (t *tx) foldForward(r *dedupe.Receipt) error {
	keys, err := t.forwardStatuses(r)
	for _, k := range keys {
		t.delete(k)
	}
	return err
}
