package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/tidwall/gjson"

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
// the metadata of every dead letter of q.Target, two times of each.
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
	first := newFirstN(page.Size(), compareDead)
	err = s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			if q.Target.Route != "" && !routeIs(item.Key(), q.Target.Route) {
				continue // a route of every source: the prefix is all of them
			}
			var created, deadAt time.Time
			err := item.Value(func(b []byte) error {
				meta, _, err := splitEntry(b)
				if err != nil {
					return err
				}
				times := gjson.GetManyBytes(meta, "created_at", "dead_at")
				if created, err = time.Parse(time.RFC3339Nano, times[0].Str); err != nil {
					return err
				}
				deadAt, _ = time.Parse(time.RFC3339Nano, times[1].Str)
				return nil
			})
			if err != nil {
				return unavailable(fmt.Errorf("dead letter %q: %w", item.Key(), err))
			}
			if !q.Since.IsZero() && deadAt.Before(q.Since) || !q.Until.IsZero() && !deadAt.Before(q.Until) {
				continue
			}
			ref := deadRef{created: created, key: item.Key()}
			if after != nil && compareDead(ref, *after) <= 0 {
				continue
			}
			ref.key = item.KeyCopy(nil)
			ref.target, ref.requestID = deadKeyParts(ref.key)
			first.add(ref)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	refs, more = first.page()
	return refs, more, nil
}
