package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/versioning"
)

// enqueue stages e at the end of the outbox once for each of routes, with
// its body in the payload key, which lives as long as the receipt
// (expiresAt) and which redelivery reads too: the body is written once,
// whatever the number of routes, and each route's outbox entry holds the
// rest. Once the batch commits, the queue gets the entries with the body.
func (t *tx) enqueue(e *forward.Entry, routes []string, expiresAt uint64) {
	e.Route, e.Seq = routes[0], t.nextSeq()
	payload := encodeEntry(e)
	t.setRaw(payloadKey(e.Source, e.RequestID), payload, expiresAt)
	// The encoding is the metadata followed by the body, so the first
	// route's entry without its body is the encoding without its tail.
	metaLen := len(payload) - len(e.Body)
	meta := payload[:metaLen:metaLen]
	// e.Body may be the caller's request buffer, valid only while the op
	// runs; the encoding ends with a copy of it that nothing changes,
	// which every route's entry shares.
	body := payload[metaLen:]
	for i, route := range routes {
		if i > 0 {
			withoutBody := *e
			withoutBody.Route, withoutBody.Seq, withoutBody.Body = route, t.nextSeq(), nil
			meta, e = encodeEntry(&withoutBody), &withoutBody
		}
		t.setRaw(outboxKey(e.Seq), meta, 0)
		t.changes = append(t.changes, change{entry: *e, body: body, expiresAt: expiresAt})
	}
}

// getEntry decodes the entry at key; found is false when it is absent.
func (t *tx) getEntry(key []byte, withBody bool) (e forward.Entry, found bool, err error) {
	b, err := t.getRaw(key)
	if err != nil || b == nil {
		return e, false, err
	}
	e, err = decodeEntryAt(key, b, withBody)
	return e, err == nil, err
}

// decodeEntryAt decodes b, the value at key; an outbox entry's position is
// its key's.
func decodeEntryAt(key, b []byte, withBody bool) (e forward.Entry, err error) {
	if err := decodeEntryValue(b, withBody, &e); err != nil {
		return e, fmt.Errorf("%q: %w", key, err)
	}
	if key[0] == prefixOutbox {
		e.Seq = binary.BigEndian.Uint64(key[1:])
	}
	return e, nil
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
	// decodeBody copies the body out, so the value itself need not be.
	err = item.Value(func(p []byte) error {
		body, createdAt, err = decodeBody(p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("payload of %s/%s: %w", e.Source, e.RequestID, err)
	}
	if !createdAt.Equal(e.CreatedAt) {
		return nil, nil
	}
	return body, nil
}

// Notify is signalled after a commit that added outbox entries or settled
// one.
func (s *Store) Notify() <-chan struct{} { return s.notify }

// Claim hands owner up to n of target's due lane heads, each for lease
// (forward.Queue). Leases are held in memory: this store is its
// directory's only process.
func (s *Store) Claim(ctx context.Context, owner string, target forward.Target, n int, lease time.Duration) ([]forward.Claim, error) {
	// Not Ready: below the free-space reserve forwarding goes on, and
	// settling what it sends frees space.
	if err := s.readable(); err != nil {
		return nil, err
	}
	claims, unread := s.queue.claim(owner, target, n, lease, s.Now())
	if len(unread) == 0 {
		return claims, nil
	}
	err := s.view(func(txn *badger.Txn) error {
		t := s.reader(txn)
		for _, i := range unread {
			// The queue holds committed entries only, and the commit that
			// removes one from the outbox removes it from the queue after.
			e, found, err := t.getEntry(outboxKey(claims[i].Seq), false)
			if err != nil {
				return err
			}
			if !found {
				return unavailable(fmt.Errorf("outbox entry %d is missing", claims[i].Seq))
			}
			if e.Body, err = t.payload(&e); err != nil {
				return err
			}
			claims[i].Entry = e
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", target, err)
	}
	return claims, nil
}

// Pending returns how many entries wait to be forwarded, by target.
func (s *Store) Pending(ctx context.Context) (map[forward.Target]int, error) {
	if err := s.readable(); err != nil {
		return nil, err
	}
	return s.queue.pending(), nil
}

// Outbox returns a page of the pending entries of target, without
// bodies. It reads the outbox keys, ordered by position, from the
// cursor's: a page costs what it lists, and takes nothing from claims. A
// target's entries among many others' are looked for through at most
// storage.MaxExamined keys a page, so a page may come back short with a
// cursor.
func (s *Store) Outbox(ctx context.Context, target forward.Target, page storage.Page) ([]forward.Entry, string, error) {
	var after uint64
	if page.Cursor != "" {
		pos, err := decodeCursor(cursorOutbox, page.Cursor)
		if err != nil || len(pos) != 8 {
			return nil, "", badCursor()
		}
		after = binary.BigEndian.Uint64(pos)
	}
	limit := page.Size()
	var entries []forward.Entry
	var next string
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixOutbox}, PrefetchValues: true, PrefetchSize: min(limit, 256)})
		defer it.Close()
		examined := 0
		var last uint64
		for it.Seek(outboxKey(after + 1)); it.Valid(); it.Next() {
			if len(entries) == limit || examined == storage.MaxExamined {
				next = encodeCursor(cursorOutbox, binary.BigEndian.AppendUint64(nil, last))
				return nil
			}
			examined++
			item := it.Item()
			last = binary.BigEndian.Uint64(item.Key()[1:])
			var tg forward.Target
			err := item.Value(func(b []byte) (err error) {
				tg, err = entryTarget(b)
				return err
			})
			if err != nil {
				return unavailable(fmt.Errorf("%q: %w", item.Key(), err))
			}
			if target.Source != "" && tg.Source != target.Source || target.Route != "" && tg.Route != target.Route {
				continue
			}
			e, err := decodeItem(item)
			if err != nil {
				return err
			}
			entries = append(entries, e)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return entries, next, nil
}

// DeadLetters returns a page of the dead letters of target, without
// bodies, in key order: source, route, request ID. The cursor is the last
// key listed.
func (s *Store) DeadLetters(ctx context.Context, target forward.Target, page storage.Page) ([]forward.Entry, string, error) {
	prefix := targetPrefix(prefixDead, target)
	from := prefix
	if page.Cursor != "" {
		last, err := decodeCursor(cursorDead, page.Cursor)
		if err != nil || !bytes.HasPrefix(last, prefix) {
			return nil, "", badCursor()
		}
		from = append(last, 0) // the first key after it
	}
	limit := page.Size()
	var entries []forward.Entry
	var next string
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: min(limit, 256)})
		defer it.Close()
		var last []byte
		for it.Seek(from); it.Valid(); it.Next() {
			if target.Route != "" && !routeIs(it.Item().Key(), target.Route) {
				continue // a route of every source: the prefix is all of them
			}
			if len(entries) == limit {
				next = encodeCursor(cursorDead, last)
				return nil
			}
			e, err := decodeItem(it.Item())
			if err != nil {
				return err
			}
			entries = append(entries, e)
			last = it.Item().KeyCopy(last[:0])
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return entries, next, nil
}

// decodeItem decodes the entry an iterator is at, without its body.
func decodeItem(item *badger.Item) (e forward.Entry, err error) {
	// The iterator holds the value: a Get would search every level again.
	err = item.Value(func(b []byte) (err error) {
		e, err = decodeEntryAt(item.Key(), b, false)
		return err
	})
	if err != nil {
		return e, unavailable(err)
	}
	return e, nil
}

// Settle records what became of the claimed entry (forward.Queue): the
// entry is removed (delivered, superseded), rescheduled (retrying) or moved
// to the dead letters with the body the claim carried (dead), and the
// forward status of its route says so, in one transaction. It reads
// nothing from Badger: the queue holds the entry as it is.
func (s *Store) Settle(ctx context.Context, c forward.Claim, r forward.Result) error {
	err := s.update(func(t *tx) error {
		ok, lost := s.queue.check(&c)
		if lost {
			return forward.ErrLeaseLost
		}
		if !ok {
			return nil
		}
		eff := forward.Apply(c.Entry, r)
		key := outboxKey(c.Seq)
		switch eff.Move {
		case forward.Reschedule:
			t.setRaw(key, encodeEntry(&eff.Entry), 0)
		case forward.Bury:
			t.delete(key)
			if err := t.bury(&eff.Entry); err != nil {
				return err
			}
		default:
			t.delete(key)
		}
		t.changes = append(t.changes, change{settle: &settlement{claim: c, eff: eff}})
		return t.setForward(&c.Entry, eff.Status, s.ReceiptTTL)
	})
	if err != nil {
		return fmt.Errorf("settle %s/%s: %w", c.Target(), c.RequestID, err)
	}
	return nil
}

// bury stages e as its target's dead letter, with its key in the index
// by age. A dead letter of the same request ID that it replaces (one
// that was accepted again after its receipt expired, and died again)
// takes its index key with it: only this path, which is rare, reads on
// settling.
func (t *tx) bury(e *forward.Entry) error {
	key := deadKey(e.Target(), e.RequestID)
	old, found, err := t.getEntry(key, false)
	if err != nil {
		return err
	}
	age := deadAgeKey(e)
	if found {
		if oldAge := deadAgeKey(&old); !bytes.Equal(oldAge, age) {
			t.delete(oldAge)
		}
	}
	t.setRaw(key, encodeEntry(e), 0)
	t.setRaw(age, appendKeyTime(nil, *e.DeadAt), 0)
	return nil
}

// unbury stages the removal of e, the dead letter at key, and of its index key.
func (t *tx) unbury(key []byte, e *forward.Entry) {
	t.delete(key)
	t.delete(deadAgeKey(e))
}

// setForward writes the forward status of e's request on e's route; e's
// CreatedAt is when its receipt was first seen. It expires a receipt TTL
// from now, which is no earlier than its receipt: a receipt expires a TTL
// after its last delivery, and a redelivery staged after this folds the
// key into the receipt. So it needs no read of the receipt; it may outlive
// the receipt, which is why its key names the receipt (forwardKey).
func (t *tx) setForward(e *forward.Entry, status webhookd.ForwardStatus, ttl time.Duration) error {
	return t.set(forwardKey(e.Source, e.RequestID, e.CreatedAt, e.Route), &status, expiry(t.now, ttl))
}

// receiptOf returns the receipt of requestID with its routes' current
// forward statuses, or nil when none is held.
func (t *tx) receiptOf(source, requestID string) (*dedupe.Receipt, error) {
	var r dedupe.Receipt
	found, err := t.get(receiptKey(source, requestID), &r)
	if err != nil || !found {
		return nil, err
	}
	if _, err := t.forwardStatuses(&r); err != nil {
		return nil, err
	}
	return &r, nil
}

// latestOf returns the latest version of source's resource, or nil.
func (t *tx) latestOf(source, resource string) (*versioning.Latest, error) {
	l, found, err := t.getLatest(source, resource)
	if err != nil || !found {
		return nil, err
	}
	return &l, nil
}

// RetryDeadLetter puts a dead letter of target back into the outbox with
// its attempts reset.
func (s *Store) RetryDeadLetter(ctx context.Context, target forward.Target, requestID string) error {
	if err := s.space.refusal(); err != nil {
		return err
	}
	if err := s.update(func(t *tx) error { return s.stageRetry(t, target, requestID) }); err != nil {
		return fmt.Errorf("retry dead letter: %w", err)
	}
	return nil
}

// stageRetry stages the retry of a dead letter, or says why not.
func (s *Store) stageRetry(t *tx, target forward.Target, requestID string) error {
	key := deadKey(target, requestID)
	e, found, err := t.getEntry(key, true)
	if err != nil {
		return err
	}
	if !found {
		return webhookd.Errorf(webhookd.ENOTFOUND, "no dead letter for %s/%s", target, requestID)
	}
	held, err := t.receiptOf(target.Source, requestID)
	if err != nil {
		return err
	}
	if err := forward.CanRetry(&e, held); err != nil {
		return err
	}
	if err := t.canResend(&e); err != nil {
		return err
	}
	t.unbury(key, &e)
	return t.requeue(e, []string{e.Route}, s.ReceiptTTL)
}

// DiscardDeadLetter drops a dead letter of target; its receipt says it was
// discarded on that route.
func (s *Store) DiscardDeadLetter(ctx context.Context, target forward.Target, requestID string) error {
	if err := s.update(func(t *tx) error { return s.stageDiscard(t, target, requestID) }); err != nil {
		return fmt.Errorf("discard dead letter: %w", err)
	}
	return nil
}

// stageDiscard stages the discarding of a dead letter.
func (s *Store) stageDiscard(t *tx, target forward.Target, requestID string) error {
	key := deadKey(target, requestID)
	e, found, err := t.getEntry(key, false)
	if err != nil {
		return err
	}
	if !found {
		return webhookd.Errorf(webhookd.ENOTFOUND, "no dead letter for %s/%s", target, requestID)
	}
	t.unbury(key, &e)
	held, err := t.receiptOf(target.Source, requestID)
	if err != nil {
		return err
	}
	if status, ok := forward.Discarded(&e, held); ok {
		return t.setForward(&e, status, s.ReceiptTTL)
	}
	return nil
}

// Redeliver forwards an accepted request again to route, or to every
// route whose forwarding ended when route is "", with the same
// Idempotency-Key, for a downstream that lost it.
func (s *Store) Redeliver(ctx context.Context, source, requestID, route string) error {
	if err := s.space.refusal(); err != nil {
		return err
	}
	err := s.update(func(t *tx) error {
		r, err := t.receiptOf(source, requestID)
		if err != nil {
			return err
		}
		if r == nil {
			return webhookd.Errorf(webhookd.ENOTFOUND, "no receipt for %s/%s", source, requestID)
		}
		routes, err := forward.RedeliverTo(r, route)
		if err != nil {
			return err
		}
		e, found, err := t.getEntry(payloadKey(source, requestID), true)
		if err != nil {
			return err
		}
		if !found {
			return forward.ErrNoPayload
		}
		if err := t.canResend(&e); err != nil {
			return err
		}
		return t.requeue(e, routes, s.ReceiptTTL)
	})
	if err != nil {
		return fmt.Errorf("redeliver: %w", err)
	}
	return nil
}

func (t *tx) canResend(e *forward.Entry) error {
	if e.Resource == "" || e.Version == "" {
		return nil
	}
	l, err := t.latestOf(e.Source, e.Resource)
	if err != nil {
		return err
	}
	return forward.CanResend(e, l)
}

// requeue puts e, with its body, at the end of the outbox of each of
// routes as a fresh forward intent; its payload then lives for the
// receipt TTL from now, and so do the index keys of its receipt (first
// seen at e.CreatedAt), which Expire finds the payload from.
func (t *tx) requeue(e forward.Entry, routes []string, ttl time.Duration) error {
	e, status := forward.Requeue(e, t.now)
	expiresAt := expiry(t.now, ttl)
	t.enqueue(&e, routes, expiresAt)
	pos := receiptPos{firstSeen: e.CreatedAt, source: e.Source, requestID: e.RequestID}
	// The receipt may have expired, and its index key with it: the key's
	// value is read whatever its expiry, so that it keeps naming every
	// route whose status the receipt has.
	index := byTimeKey(pos)
	held, err := t.indexedRoutes(index)
	if err != nil {
		return err
	}
	for _, route := range routes {
		if !slices.Contains(held, route) {
			held = append(held, route)
		}
	}
	t.setRaw(index, appendRoutes(nil, held), expiresAt)
	t.setRaw(bySourceKey(pos), nil, expiresAt)
	for _, route := range routes {
		e.Route = route
		if err := t.setForward(&e, status, ttl); err != nil {
			return err
		}
	}
	return nil
}

// DeadLetterCounts returns how many dead letters each target has. It
// reads keys only.
func (s *Store) DeadLetterCounts() (map[forward.Target]int, error) {
	counts := make(map[forward.Target]int)
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixDead}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			tg, _ := deadKeyParts(it.Item().Key())
			counts[tg]++
		}
		return nil
	})
	return counts, err
}

// loadQueue fills the queue from the outbox keys, at Open. It decodes each
// entry's metadata, which holds no body, and the queue keeps only the
// entry's place: a backlog of millions loads without holding them all.
func (s *Store) loadQueue() error {
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixOutbox}, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			e := forward.Entry{Seq: binary.BigEndian.Uint64(item.Key()[1:])}
			err := item.Value(func(b []byte) error { return decodeEntryValue(b, false, &e) })
			if err != nil {
				return fmt.Errorf("%q: %w", item.Key(), err)
			}
			s.queue.add(e, nil, 0)
		}
		return nil
	})
}
