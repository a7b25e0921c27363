package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
)

// enqueue stages e at the next outbox position, with its body in the
// payload key, which lives as long as the receipt (expiresAt) and which
// redelivery reads too: the body is written once, the outbox entry holds
// the rest.
func (t *tx) enqueue(e *forward.Entry, expiresAt uint64) error {
	e.Seq = t.nextSeq()
	payload, err := encodeEntry(e)
	if err != nil {
		return err
	}
	t.setRaw(payloadKey(e.Source, e.RequestID), payload, expiresAt)
	// The encoding is the metadata followed by the body, so the entry
	// without its body is the encoding without its tail.
	metaLen := len(payload) - len(e.Body)
	t.setRaw(outboxKey(e.Seq), payload[:metaLen:metaLen], 0)
	held := *e
	// e.Body may be the caller's request buffer, valid only while the op
	// runs; the encoding ends with a copy of it that nothing changes.
	held.Body = payload[metaLen:]
	t.added = append(t.added, held)
	return nil
}

// maxTail bounds the entries the tail holds for a forwarder that does not
// keep up or does not run; past it the forwarder reads them from Badger.
const maxTail = 8192

// tail keeps the outbox entries committed since Open, in outbox order, until
// the forwarder has loaded them, so that Pending hands them over from
// memory instead of reading back and decoding what was just written.
type tail struct {
	mu      sync.Mutex
	from    uint64 // every entry committed at or after from is held, or was handed over
	entries []forward.Entry
}

func (t *tail) add(entries []forward.Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entries = append(t.entries, entries...)
	if len(t.entries) > maxTail {
		t.from = t.entries[len(t.entries)-1].Seq + 1
		t.entries = nil
	}
}

// forget sends Pending to Badger for every position before next: a commit
// that failed may have left some of its entries there all the same.
func (t *tail) forget(next uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.from, t.entries = next, nil
}

// after returns up to limit entries after position after; ok is false when
// some of them may not be held and Badger must be read instead.
func (t *tail) after(after uint64, limit int) (entries []forward.Entry, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := 0
	for i < len(t.entries) && t.entries[i].Seq <= after {
		i++
	}
	clear(t.entries[:i]) // handed over already: let their bodies go
	t.entries = t.entries[i:]
	if after+1 < t.from {
		return nil, false
	}
	return slices.Clone(t.entries[:min(limit, len(t.entries))]), true
}

// getEntry decodes the entry at key; found is false when it is absent. An
// outbox entry's body is read from its payload key; when that has expired,
// Body is nil.
func (t *tx) getEntry(key []byte, withBody bool) (e forward.Entry, found bool, err error) {
	b, err := t.getRaw(key)
	if err != nil || b == nil {
		return e, false, err
	}
	e, err = t.decodeEntry(key, b, withBody)
	return e, err == nil, err
}

// decodeEntry decodes b, the value at key.
func (t *tx) decodeEntry(key, b []byte, withBody bool) (e forward.Entry, err error) {
	if err := decodeEntryValue(b, withBody, &e); err != nil {
		return e, fmt.Errorf("%q: %w", key, err)
	}
	if key[0] != prefixOutbox {
		return e, nil
	}
	e.Seq = binary.BigEndian.Uint64(key[1:])
	if withBody && len(e.Body) == 0 {
		e.Body, err = t.payload(&e)
	}
	return e, err
}

// payload returns the body in e's payload key, or nil when the key has
// expired. A payload key belongs to one receipt of its request ID: an
// entry that outlived its receipt (it waited in its lane, or webhookd was
// down), after the provider sent the request ID again, finds the later
// receipt's payload there, which is not its own, so nil too.
func (t *tx) payload(e *forward.Entry) ([]byte, error) {
	item, err := t.item(payloadKey(e.Source, e.RequestID))
	if err != nil || item == nil {
		return nil, err
	}
	var body []byte
	var createdAt time.Time
	// DecodeBody copies the body out, so the value itself need not be.
	err = item.Value(func(p []byte) error {
		body, createdAt, err = decodeBody(p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("payload of %s/%s: %w", e.Source, e.RequestID, err)
	}
	if !createdAt.IsZero() && !createdAt.Equal(e.CreatedAt) {
		return nil, nil
	}
	return body, nil
}

// Notify is signalled after a commit that added outbox entries.
func (s *Store) Notify() <-chan struct{} { return s.notify }

// Pending returns up to limit outbox entries after position after, in
// outbox order. Entries read from Badger come with their bodies until those
// add up to bodies bytes, and without them past it: a forwarder holds only
// so many, and reads the rest with Body when it sends them. Entries still
// in memory come with theirs.
func (s *Store) Pending(ctx context.Context, after uint64, limit, bodies int) ([]forward.Entry, error) {
	if entries, ok := s.tail.after(after, limit); ok {
		return entries, nil
	}
	var entries []forward.Entry
	err := s.scan(outboxKey(after+1), []byte{prefixOutbox}, limit, bodies, &entries)
	return entries, err
}

// Outbox returns the pending entries of source ("" for all), without bodies.
func (s *Store) Outbox(ctx context.Context, source string) ([]forward.Entry, error) {
	var entries []forward.Entry
	if err := s.scan([]byte{prefixOutbox}, []byte{prefixOutbox}, 0, 0, &entries); err != nil {
		return nil, err
	}
	return filterSource(entries, source), nil
}

// DeadLetters returns the dead letters of source ("" for all), without bodies.
func (s *Store) DeadLetters(ctx context.Context, source string) ([]forward.Entry, error) {
	var entries []forward.Entry
	p := sourcePrefix(prefixDead, source)
	err := s.scan(p, p, 0, 0, &entries)
	return entries, err
}

func filterSource(entries []forward.Entry, source string) []forward.Entry {
	if source == "" {
		return entries
	}
	kept := entries[:0]
	for _, e := range entries {
		if e.Source == source {
			kept = append(kept, e)
		}
	}
	return kept
}

// scan decodes entries from start while keys have prefix, limit 0 being
// all, with their bodies until those add up to bodies bytes.
func (s *Store) scan(start, prefix []byte, limit, bodies int, out *[]forward.Entry) error {
	return s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		t := &tx{txn: txn}
		for it.Seek(start); it.Valid(); it.Next() {
			// The iterator holds the value: a Get would search every level again.
			item := it.Item()
			b, err := item.ValueCopy(nil)
			if err != nil {
				return unavailable(err)
			}
			e, err := t.decodeEntry(item.KeyCopy(nil), b, bodies > 0)
			if err != nil {
				return err
			}
			bodies -= len(e.Body)
			*out = append(*out, e)
			if limit > 0 && len(*out) == limit {
				return nil
			}
		}
		return nil
	})
}

// Body returns the body of e, an outbox entry held without it. It reads the
// payload key alone: the forwarder holds e's metadata, which only the
// forwarder changes. An entry whose payload key is gone is read whole: it
// may carry its body itself (written before bodies moved to the payload
// key), or be settled already.
func (s *Store) Body(ctx context.Context, e forward.Entry) ([]byte, error) {
	var body []byte
	err := s.view(func(txn *badger.Txn) error {
		t := &tx{txn: txn}
		var err error
		if body, err = t.payload(&e); err != nil || body != nil {
			return err
		}
		whole, found, err := t.getEntry(outboxKey(e.Seq), true)
		if err == nil && !found {
			err = webhookd.Errorf(webhookd.ENOTFOUND, "outbox entry %d not found", e.Seq)
		}
		body = whole.Body
		return err
	})
	if err == nil && body == nil {
		err = fmt.Errorf("outbox entry %d: %w", e.Seq, forward.ErrPayloadGone)
	}
	return body, err
}

// Settle records what became of forwarding e: the outbox entry is removed
// (delivered, superseded), rescheduled (retrying) or moved to the dead
// letters (dead), and the forward status says so, in one transaction.
//
// e must still be in the outbox: removing it does not look first (that
// Get searched every LSM level, 7 % of a drain's CPU). The forwarder holds
// each entry until it is settled, and after a Settle that failed, which
// may have been recorded all the same, it asks Holds before it sends or
// settles that entry again. Rescheduling and dead-lettering read the entry
// anyway, and do nothing when it is gone.
//
// A dead letter keeps the entry's body, from its payload key or, once that
// expired (the entry waited in its lane behind older versions' retries),
// from e.Body: the body the forwarder sent.
func (s *Store) Settle(ctx context.Context, e forward.Entry, r forward.Result) error {
	err := s.update(func(t *tx) error {
		key := outboxKey(e.Seq)
		status := webhookd.ForwardStatus{State: r.State, Attempts: r.Attempts, LastStatus: r.Status, LastError: r.Error}
		// A rescheduled or dead entry is rewritten, so it is read and
		// decoded; the common outcomes below only delete it.
		switch r.State {
		case webhookd.ForwardRetrying:
			// With the body it holds itself, if an older build wrote one
			// into it: that body has no payload key.
			b, err := t.getRaw(key)
			if err != nil || b == nil {
				return err
			}
			var cur forward.Entry
			if err := decodeEntryValue(b, true, &cur); err != nil {
				return fmt.Errorf("%q: %w", key, err)
			}
			cur.Attempts, cur.LastStatus, cur.LastError = r.Attempts, r.Status, r.Error
			cur.NextAttemptAt, status.NextAttemptAt = r.NextAttemptAt, &r.NextAttemptAt
			if err := t.setEntry(key, &cur); err != nil {
				return err
			}
		case webhookd.ForwardDead:
			// A dead letter keeps its body: it outlives the payload key.
			cur, found, err := t.getEntry(key, true)
			if err != nil || !found {
				return err
			}
			if cur.Body == nil {
				cur.Body = e.Body
			}
			cur.Attempts, cur.LastStatus, cur.LastError = r.Attempts, r.Status, r.Error
			t.delete(key)
			cur.DeadAt, cur.BodyLost = &r.At, cur.Body == nil
			if err := t.setEntry(deadKey(cur.Source, cur.RequestID), &cur); err != nil {
				return err
			}
		default:
			t.delete(key)
			if r.State == webhookd.ForwardDelivered {
				status.DeliveredAt = &r.At
			}
		}
		return t.setForward(e.Source, e.RequestID, e.CreatedAt, status, s.ReceiptTTL)
	})
	if err != nil {
		return fmt.Errorf("settle %s/%s: %w", e.Source, e.RequestID, err)
	}
	return nil
}

// Holds reports whether e is still in the outbox.
func (s *Store) Holds(ctx context.Context, e forward.Entry) (bool, error) {
	var held bool
	err := s.view(func(txn *badger.Txn) error {
		var err error
		held, err = (&tx{txn: txn}).exists(outboxKey(e.Seq))
		return err
	})
	return held, err
}

func (t *tx) setEntry(key []byte, e *forward.Entry) error {
	b, err := encodeEntry(e)
	if err != nil {
		return err
	}
	t.setRaw(key, b, 0)
	return nil
}

// setForward writes the forward status of the request whose receipt was
// first seen at firstSeen. It expires a receipt TTL from now, which is no
// earlier than its receipt: a receipt expires a TTL after its last
// delivery, and a redelivery staged after this folds the key into the
// receipt. So it needs no read of the receipt (a Get that searched every
// LSM level, a tenth of a drain's CPU); it may outlive the receipt, which
// is why its key names the receipt (forwardKey).
func (t *tx) setForward(source, requestID string, firstSeen time.Time, status webhookd.ForwardStatus, ttl time.Duration) error {
	rec := forwardRecord{ForwardStatus: status, ReceiptFirstSeen: firstSeen}
	return t.set(forwardKey(source, requestID, firstSeen), &rec, expiry(time.Now(), ttl))
}

// RetryDeadLetter puts a dead letter back into the outbox with its attempts
// reset.
func (s *Store) RetryDeadLetter(ctx context.Context, source, requestID string) error {
	if err := s.space.refusal(); err != nil {
		return err
	}
	now := time.Now()
	err := s.update(func(t *tx) error {
		key := deadKey(source, requestID)
		e, found, err := t.getEntry(key, true)
		if err != nil {
			return err
		}
		if !found {
			return webhookd.Errorf(webhookd.ENOTFOUND, "no dead letter for %s/%s", source, requestID)
		}
		if e.BodyLost {
			return webhookd.Errorf(webhookd.ECONFLICT, "the payload of %s/%s expired before it was forwarded: there is nothing to send", source, requestID)
		}
		// A dead letter outlives its receipt. Once the request ID came back
		// under a new receipt, that request is forwarded on its own, and
		// this one would take its payload and status.
		var r dedupe.Receipt
		if found, err := t.get(receiptKey(source, requestID), &r); err != nil {
			return err
		} else if found && !r.FirstSeen.Equal(e.CreatedAt) {
			return webhookd.Errorf(webhookd.ECONFLICT, "%s/%s was received again after this dead letter's receipt expired, and is forwarded as that new request: discard this dead letter", source, requestID)
		}
		if err := t.checkStillLatest(&e); err != nil {
			return err
		}
		t.delete(key)
		return t.requeue(&e, now, s.ReceiptTTL)
	})
	if err != nil {
		return fmt.Errorf("retry dead letter: %w", err)
	}
	return nil
}

// DiscardDeadLetter drops a dead letter; its receipt says it was discarded.
func (s *Store) DiscardDeadLetter(ctx context.Context, source, requestID string) error {
	err := s.update(func(t *tx) error {
		key := deadKey(source, requestID)
		e, found, err := t.getEntry(key, false)
		if err != nil {
			return err
		}
		if !found {
			return webhookd.Errorf(webhookd.ENOTFOUND, "no dead letter for %s/%s", source, requestID)
		}
		t.delete(key)
		// The status is the forward key's, or the receipt's once a
		// redelivery folded it in. With no receipt, or a later one under
		// the same request ID (a dead letter outlives its receipt), there
		// is none to keep.
		var r dedupe.Receipt
		if found, err := t.get(receiptKey(source, requestID), &r); err != nil || !found || !r.FirstSeen.Equal(e.CreatedAt) {
			return err
		}
		if _, err := t.forwardStatus(&r); err != nil {
			return err
		}
		r.Forward.State, r.Forward.NextAttemptAt = webhookd.ForwardDiscarded, nil
		return t.setForward(source, requestID, r.FirstSeen, r.Forward, s.ReceiptTTL)
	})
	if err != nil {
		return fmt.Errorf("discard dead letter: %w", err)
	}
	return nil
}

// Redeliver forwards an accepted request again, with the same
// Idempotency-Key, for a downstream that lost it.
func (s *Store) Redeliver(ctx context.Context, source, requestID string) error {
	if err := s.space.refusal(); err != nil {
		return err
	}
	now := time.Now()
	err := s.update(func(t *tx) error {
		var r dedupe.Receipt
		found, err := t.get(receiptKey(source, requestID), &r)
		if err != nil {
			return err
		}
		if !found {
			return webhookd.Errorf(webhookd.ENOTFOUND, "no receipt for %s/%s", source, requestID)
		}
		if _, err := t.forwardStatus(&r); err != nil {
			return err
		}
		switch {
		case r.Decision != webhookd.Accepted:
			return webhookd.Errorf(webhookd.ECONFLICT, "request was decided %s, not accepted: there is nothing to redeliver", r.Decision)
		case r.Forward.State == webhookd.ForwardPending || r.Forward.State == webhookd.ForwardRetrying:
			return webhookd.Errorf(webhookd.ECONFLICT, "request is already queued for forwarding (%s)", r.Forward.State)
		case r.Forward.State == webhookd.ForwardDead:
			return webhookd.Errorf(webhookd.ECONFLICT, "request is a dead letter: retry it with POST /admin/deadletters/%s/{request_id}/retry", source)
		}
		e, found, err := t.getEntry(payloadKey(source, requestID), true)
		if err != nil {
			return err
		}
		if !found {
			return webhookd.Errorf(webhookd.ECONFLICT, "the source did not forward this request, or its payload is no longer held")
		}
		if err := t.checkStillLatest(&e); err != nil {
			return err
		}
		return t.requeue(&e, now, s.ReceiptTTL)
	})
	if err != nil {
		return fmt.Errorf("redeliver: %w", err)
	}
	return nil
}

// checkStillLatest refuses to send e again once a newer version of its
// resource was accepted: the downstream would get an older version after a
// newer one.
func (t *tx) checkStillLatest(e *forward.Entry) error {
	if e.Resource == "" || e.Version == "" {
		return nil
	}
	l, found, err := t.getLatest(e.Source, e.Resource)
	if err != nil {
		return err
	}
	if found && l.RequestID != e.RequestID {
		return webhookd.Errorf(webhookd.ECONFLICT, "version %s of resource %s was accepted after this request's version %s: sending it now would deliver an older version after a newer one", l.Version, e.Resource, e.Version)
	}
	return nil
}

// requeue puts e, with its body, at the end of the outbox as a fresh
// forward intent; its payload then lives for the receipt TTL from now.
func (t *tx) requeue(e *forward.Entry, now time.Time, ttl time.Duration) error {
	e.Attempts, e.LastStatus, e.LastError, e.DeadAt = 0, 0, "", nil
	e.NextAttemptAt = now
	if err := t.enqueue(e, expiry(now, ttl)); err != nil {
		return err
	}
	return t.setForward(e.Source, e.RequestID, e.CreatedAt, webhookd.ForwardStatus{State: webhookd.ForwardPending}, ttl)
}

// DeadLetterCounts returns how many dead letters each source has. It reads
// keys only.
func (s *Store) DeadLetterCounts() (map[string]int, error) {
	counts := make(map[string]int)
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixDead}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			source, _, _ := strings.Cut(string(it.Item().Key()[1:]), "\x00")
			counts[source]++
		}
		return nil
	})
	return counts, err
}
