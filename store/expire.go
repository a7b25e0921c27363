package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/webhookd/webhookd"
)

// expireBatch is how many expired receipts one read of the index collects
// and one operation deletes the keys of.
const expireBatch = 128

// expireRewind is how often a pass of Expire reads the index from its
// beginning rather than from where the last pass left off.
const expireRewind = time.Hour

// expire runs Expire, every ExpiryInterval.
func (s *Store) expire() {
	if err := s.Expire(); err != nil && !errors.Is(err, ErrClosed) {
		s.Logger.Warn("delete expired receipts", zap.Error(err))
	}
}

// Expire deletes the keys of the receipts whose receipt_ttl has passed:
// the receipt, its two index keys, its forward statuses and its payload.
// Reads treat them as absent already; this gives their space back.
//
// Badger drops an expired key only when a compaction rewrites the table
// holding it, and compactions rewrite a table of the last level only where
// newer tables overlap its keys. The index keys sort by time, so newer
// keys never overlap the old ones, and request IDs that grow with time
// (sequence numbers, ULIDs) put receipts and payloads in the same place:
// once at the last level, their tables would stay for good. A deletion is
// a newer key in their range, which compactions carry down to them.
//
// A pass reads the index of receipts by time up to the keys first seen a
// receipt_ttl ago (no later one can have expired), from where the last
// pass left off: the first receipt it passed over because a redelivery
// extended it, or else where it stopped. At start and every expireRewind
// it reads from the beginning instead, for index keys written behind
// that point: retrying a dead letter whose receipt expired writes its
// receipt's index keys again (requeue).
func (s *Store) Expire() error {
	s.expiring.Lock()
	defer s.expiring.Unlock()
	now := s.Now()
	from := s.expireFrom
	// expireRewound is zero until the first pass, which starts here too.
	if !now.Before(s.expireRewound.Add(expireRewind)) {
		from, s.expireRewound = []byte{prefixByTime}, now
	}
	var rewalk []byte
	for more := true; more; {
		select {
		case <-s.closing:
			return nil
		default:
		}
		var batch []expiredReceipt
		var live []byte
		err := s.view(func(txn *badger.Txn) (err error) {
			batch, live, from, more, err = expiredReceipts(txn, from, now.Add(-s.ReceiptTTL), now)
			return err
		})
		if err != nil {
			return err
		}
		if rewalk == nil {
			rewalk = live
		}
		if len(batch) > 0 {
			if err := s.update(func(t *tx) error { return stageExpiry(t, batch) }); err != nil {
				return err
			}
		}
	}
	s.expireFrom = from
	if rewalk != nil {
		s.expireFrom = rewalk
	}
	return nil
}

// expiredReceipt is the keys of one expired receipt. index is its by-time
// key, whose expiry decides: a redelivery rewrites it. The others are
// deleted with it: source (the by-source key) and forward (its statuses)
// as the receipt's own, and shared (its receipt and payload keys, which a
// later receipt under the same request ID takes over) only while they are
// expired too.
type expiredReceipt struct {
	index, source []byte
	forward       [][]byte
	shared        [][]byte
}

// expiredReceipts reads the index of receipts by time from the key from
// and returns up to expireBatch expired receipts, the first key passed
// over because its receipt still lives (nil if none), the key to read on
// from, and whether there may be more to read before the keys first seen
// after horizon. It reads no other key: an index key's value names the
// receipt's routes (indexValue), which give its forward keys, and a
// receipt with routes has a payload.
//
// It iterates every version, as Badger's iterators otherwise skip expired
// keys: the first version of a key is its newest. Every key it deletes
// has an expiry, so a version without one is a deletion, an earlier
// pass's.
func expiredReceipts(txn *badger.Txn, from []byte, horizon, now time.Time) (batch []expiredReceipt, live, next []byte, more bool, err error) {
	it := txn.NewIterator(badger.IteratorOptions{AllVersions: true, Prefix: []byte{prefixByTime}})
	defer it.Close()
	var last []byte
	for it.Seek(from); it.Valid(); it.Next() {
		item := it.Item()
		if bytes.Equal(item.Key(), last) {
			continue
		}
		last = item.KeyCopy(last)
		pos, ok := indexPos(last)
		if !ok {
			continue
		}
		if pos.firstSeen.After(horizon) || len(batch) == expireBatch {
			return batch, live, last, len(batch) == expireBatch, nil
		}
		switch exp := item.ExpiresAt(); {
		case exp == 0:
		case exp > uint64(now.Unix()):
			if live == nil {
				live = bytes.Clone(last)
			}
		default:
			var routes []string
			if err := item.Value(func(v []byte) (err error) { routes, err = readRoutes(v); return err }); err != nil {
				return nil, nil, nil, false, fmt.Errorf("%q: %w", last, err)
			}
			r := expiredReceipt{index: bytes.Clone(last), source: bySourceKey(pos), shared: [][]byte{receiptKey(pos.source, pos.requestID)}}
			for _, route := range routes {
				r.forward = append(r.forward, forwardKey(pos.source, pos.requestID, pos.firstSeen, route))
			}
			if len(routes) > 0 {
				r.shared = append(r.shared, payloadKey(pos.source, pos.requestID))
			}
			batch = append(batch, r)
		}
	}
	if last == nil {
		return batch, live, from, false, nil
	}
	return batch, live, append(last, 0), false, nil // the first key after last
}

// indexValue is the value of a receipt's by-time index key: the names of
// its routes (appendRoutes), nil for none.
func indexValue(routes []webhookd.RouteStatus) []byte {
	if len(routes) == 0 {
		return nil
	}
	names := make([]string, len(routes))
	for i := range routes {
		names[i] = routes[i].Route
	}
	return appendRoutes(nil, names)
}

// appendRoutes appends the count of names, then each; nothing for none.
func appendRoutes(b []byte, names []string) []byte {
	if len(names) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = appendString(b, n)
	}
	return b
}

// readRoutes reads the names appendRoutes wrote.
func readRoutes(b []byte) ([]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	r := reader{b: b}
	n := r.uvarint("routes")
	// Each name takes a byte at least: a forged count must not allocate
	// more than the value could hold.
	if n > uint64(len(r.b)) {
		r.fail("routes")
	}
	var names []string
	for i := uint64(0); i < n && r.err == nil; i++ {
		names = append(names, r.string("route"))
	}
	return names, r.end()
}

// indexedRoutes returns the routes the index key names, expired or not;
// none once a pass deleted it.
func (t *tx) indexedRoutes(index []byte) ([]string, error) {
	it := t.txn.NewIterator(badger.IteratorOptions{AllVersions: true, Prefix: index})
	defer it.Close()
	it.Seek(index)
	if !it.Valid() || !bytes.Equal(it.Item().Key(), index) || it.Item().ExpiresAt() == 0 {
		return nil, nil
	}
	var routes []string
	err := it.Item().Value(func(v []byte) (err error) { routes, err = readRoutes(v); return err })
	return routes, err
}

// stageExpiry stages the deletion of each receipt of batch still expired:
// a redelivery since the read rewrote its index key, and a decision under
// its request ID since may have written a receipt or payload of its own.
func stageExpiry(t *tx, batch []expiredReceipt) error {
	for _, r := range batch {
		item, err := t.item(r.index)
		if err != nil {
			return err
		}
		if item != nil {
			continue
		}
		t.delete(r.index)
		t.delete(r.source)
		for _, k := range r.forward {
			t.delete(k)
		}
		for _, k := range r.shared {
			item, err := t.item(k)
			if err != nil {
				return err
			}
			if item == nil {
				t.delete(k)
			}
		}
	}
	return nil
}
