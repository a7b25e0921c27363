package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
)

// RetryDeadLetters retries, as RetryDeadLetter does, a page of the dead
// letters q selects, oldest first.
func (s *Store) RetryDeadLetters(ctx context.Context, q storage.DeadLetterQuery, page storage.Page) (storage.BulkResult, error) {
	if err := s.space.refusal(); err != nil {
		return storage.BulkResult{}, err
	}
	res, err := s.bulk(q, page, s.stageRetry)
	if err != nil {
		return res, fmt.Errorf("retry dead letters: %w", err)
	}
	return res, nil
}

// DiscardDeadLetters discards, as DiscardDeadLetter does, a page of the
// dead letters q selects, oldest first.
func (s *Store) DiscardDeadLetters(ctx context.Context, q storage.DeadLetterQuery, page storage.Page) (storage.BulkResult, error) {
	res, err := s.bulk(q, page, s.stageDiscard)
	if err != nil {
		return res, fmt.Errorf("discard dead letters: %w", err)
	}
	return res, nil
}

// deadRef is a dead letter's place in a bulk repair: dead letters are
// keyed by target and request ID, and repaired in the order they were
// accepted, so that each resource's go back into its lane in order.
type deadRef struct {
	created   time.Time
	key       []byte
	target    forward.Target
	requestID string
}

func compareDead(a, b deadRef) int {
	return cmp.Or(a.created.Compare(b.created), bytes.Compare(a.key, b.key))
}

// bulk stages repair of a page of the dead letters q selects in one
// transaction. A repair refused as a conflict leaves its dead letter,
// counted; one whose dead letter went meanwhile is not counted. A page
// whose writes do not fit in one transaction is shortened: Next then
// continues after what it did.
func (s *Store) bulk(q storage.DeadLetterQuery, page storage.Page, repair func(t *tx, target forward.Target, requestID string) error) (storage.BulkResult, error) {
	refs, more, err := s.selectDead(q, page)
	if err != nil {
		return storage.BulkResult{}, err
	}
	var res storage.BulkResult
	n := len(refs)
	for n > 0 {
		err = s.update(func(t *tx) error {
			res = storage.BulkResult{} // staged again when its batch is split
			for _, ref := range refs[:n] {
				err := repair(t, ref.target, ref.requestID)
				switch webhookd.ErrorCode(err) {
				case webhookd.ECONFLICT:
					res.Refused++
					continue
				case webhookd.ENOTFOUND:
					continue
				}
				if err != nil {
					return err
				}
				res.Done++
			}
			return nil
		})
		if !errors.Is(err, errTooBig) || n == 1 {
			break
		}
		n /= 2
	}
	if err != nil {
		return storage.BulkResult{}, err
	}
	if n > 0 && (more || n < len(refs)) {
		last := refs[n-1]
		res.Next = encodeCursor(cursorBulk, append(appendKeyTime(nil, last.created), last.key...))
	}
	return res, nil
}

// selectDead returns the first page.Size() of the dead letters q
// selects, after the page's cursor, and whether more follow. It reads
// the index by age (deadAgeKey) of each target q selects, from the
// cursor, up to a page of each: no dead letter, and no more keys than the
// page's targets times the page (the ones the death times filter out
// aside).
func (s *Store) selectDead(q storage.DeadLetterQuery, page storage.Page) (refs []deadRef, more bool, err error) {
	prefix := targetPrefix(prefixDead, q.Target)
	var after *deadRef
	if page.Cursor != "" {
		b, err := decodeCursor(cursorBulk, page.Cursor)
		if err != nil {
			return nil, false, err
		}
		created, ok := keyTime(b)
		if !ok || !bytes.HasPrefix(b[timeLen:], prefix) {
			return nil, false, badCursor()
		}
		after = &deadRef{created: created, key: b[timeLen:]}
	}
	limit := page.Size()
	first := newFirstN(limit, compareDead)
	err = s.view(func(txn *badger.Txn) error {
		targets := []forward.Target{q.Target}
		if q.Target.Source == "" || q.Target.Route == "" {
			targets = deadTargets(txn, q.Target)
		}
		for _, tg := range targets {
			if err := selectDeadOf(txn, tg, &q, after, limit, first); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	refs, more = first.page()
	return refs, more, nil
}

// deadTargets returns the targets of sel (empty fields as in
// Records.Outbox) that have dead letters, seeking past each one's keys in
// the index by age.
func deadTargets(txn *badger.Txn, sel forward.Target) []forward.Target {
	prefix := []byte{prefixDeadAge}
	if sel.Source != "" {
		prefix = pairKey(prefixDeadAge, sel.Source, "")
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var targets []forward.Target
	for it.Seek(prefix); it.Valid(); {
		tg, _ := deadKeyParts(it.Item().Key())
		if sel.Route == "" || tg.Route == sel.Route {
			targets = append(targets, tg)
		}
		past := deadAgePrefix(tg)
		past[len(past)-1] = 1 // after every key of tg, whose prefix ends in 0
		it.Seek(past)
	}
	return targets
}

// selectDeadOf adds to first up to limit+1 of tg's dead letters that q's
// death times select, after the cursor's.
func selectDeadOf(txn *badger.Txn, tg forward.Target, q *storage.DeadLetterQuery, after *deadRef, limit int, first *firstN[deadRef]) error {
	prefix := deadAgePrefix(tg)
	from := prefix
	if after != nil {
		from = appendKeyTime(bytes.Clone(prefix), after.created)
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: min(limit+1, 256)})
	defer it.Close()
	n := 0
	for it.Seek(from); it.Valid() && n <= limit; it.Next() {
		item := it.Item()
		created, ok := keyTime(item.Key()[len(prefix):])
		if !ok {
			return unavailable(fmt.Errorf("malformed index key %q", item.Key()))
		}
		var deadAt time.Time
		err := item.Value(func(b []byte) error {
			if deadAt, ok = keyTime(b); !ok {
				return errors.New("malformed death time")
			}
			return nil
		})
		if err != nil {
			return unavailable(fmt.Errorf("dead letter index %q: %w", item.Key(), err))
		}
		if !q.Since.IsZero() && deadAt.Before(q.Since) || !q.Until.IsZero() && !deadAt.Before(q.Until) {
			continue
		}
		requestID := string(item.Key()[len(prefix)+timeLen:])
		ref := deadRef{created: created, key: deadKey(tg, requestID), target: tg, requestID: requestID}
		if after != nil && compareDead(ref, *after) <= 0 {
			continue
		}
		first.add(ref)
		n++
	}
	return nil
}
