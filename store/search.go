package store

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"

	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/storage"
)

// Receipts returns a page of the receipts q selects, newest first: by
// first seen, source and request ID, all descending, the order of the
// index keys. It reads the index of q.Source's receipts, or of every
// receipt when q names no source, backwards from the cursor (or from
// Until) down to Since, and reads each key's receipt to filter it, at
// most storage.MaxExamined keys a page. A key whose receipt expired, or
// was replaced by a later receipt of its request ID, is passed over.
// The cursor is the position of the last key read.
func (s *Store) Receipts(ctx context.Context, q storage.ReceiptQuery) ([]dedupe.Receipt, string, error) {
	prefix, indexKey := []byte{prefixByTime}, byTimeKey
	if q.Source != "" {
		prefix, indexKey = bySourcePrefix(q.Source), bySourceKey
	}
	// start is the key the read starts below: every index key is longer
	// than a prefix and a time, so none at Until is read.
	start := append(slices.Clone(prefix), 0xff)
	if !q.Until.IsZero() {
		start = appendKeyTime(slices.Clone(prefix), q.Until)
	}
	if q.Cursor != "" {
		b, err := decodeCursor(cursorReceipts, q.Cursor)
		if err != nil {
			return nil, "", err
		}
		pos, ok := indexPos(append([]byte{prefixByTime}, b...))
		if !ok || q.Source != "" && pos.source != q.Source {
			return nil, "", badCursor()
		}
		start = indexKey(pos)
	}
	limit := q.Size()
	var items []dedupe.Receipt
	var next string
	err := s.view(func(txn *badger.Txn) error {
		t := s.reader(txn)
		now := uint64(t.now.Unix())
		it := txn.NewIterator(badger.IteratorOptions{Reverse: true, Prefix: prefix})
		defer it.Close()
		it.Seek(start)
		if it.Valid() && bytes.Equal(it.Item().Key(), start) {
			it.Next() // the cursor's, read on the page before
		}
		examined := 0
		var last receiptPos
		for ; it.Valid(); it.Next() {
			item := it.Item()
			pos, ok := indexPos(item.Key())
			if !ok {
				return unavailable(fmt.Errorf("malformed index key %q", item.Key()))
			}
			if !q.Since.IsZero() && pos.firstSeen.Before(q.Since) {
				return nil
			}
			// Stopping here, rather than after the last item, leaves no
			// cursor when nothing follows.
			if len(items) == limit || examined == storage.MaxExamined {
				next = encodeCursor(cursorReceipts, byTimeKey(last)[1:])
				return nil
			}
			examined++
			last = pos
			if exp := item.ExpiresAt(); exp != 0 && exp <= now {
				continue
			}
			r, err := t.receiptOf(pos.source, pos.requestID)
			if err != nil {
				return err
			}
			if r != nil && r.FirstSeen.Equal(pos.firstSeen) && selects(&q, r) {
				items = append(items, *r)
			}
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("search receipts: %w", err)
	}
	return items, next, nil
}

// selects says whether q selects r; the indexes have applied Source,
// Since and Until.
func selects(q *storage.ReceiptQuery, r *dedupe.Receipt) bool {
	switch {
	case q.Decision != "" && r.Decision != q.Decision,
		q.Resource != "" && r.Resource != q.Resource:
		return false
	case q.Route == "" && q.ForwardState == "":
		return true
	}
	for _, rs := range r.Routes {
		if (q.Route == "" || rs.Route == q.Route) && (q.ForwardState == "" || rs.State == q.ForwardState) {
			return true
		}
	}
	return false
}
