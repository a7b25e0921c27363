package store

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
)

// TestExpireDeletesTheKeysOfExpiredReceipts checks that Expire deletes
// every key of an expired receipt, and nothing that still lives: a
// receipt a redelivery extended, the payload of a request forwarded again
// through the admin API, and the receipt and payload of a request ID
// accepted again after its first receipt expired. The deletion is what
// makes compactions give the space back: Badger's clock here is behind
// the store's, so no compaction would drop these keys by their expiry.
func TestExpireDeletesTheKeysOfExpiredReceipts(t *testing.T) {
	s, decideAt, at := clocked(t)
	at(0.05)
	decideAt(delivery("delivered", "d-1", `{"n":1}`))
	unrouted := delivery("unrouted", "d-1", `{"n":2}`)
	unrouted.Forward, unrouted.Routes = false, nil
	decideAt(unrouted)
	decideAt(delivery("redelivered", "d-1", `{"n":3}`))
	decideAt(delivery("again", "d-1", `{"n":4}`))
	decideAt(delivery("requeued", "d-1", `{"n":5}`))
	for _, e := range outbox(t, s) {
		if e.RequestID == "delivered" || e.RequestID == "requeued" {
			settle(t, s, e, forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: time.Now()})
		}
	}
	first := keysOf(t, s, "delivered", "unrouted", "redelivered", "again", "requeued")
	if n := len(first["delivered"]); n != 5 {
		t.Fatalf("delivered receipt: %d keys %q, want 5 (receipt, two index keys, payload, forward status)", n, first["delivered"])
	}
	if n := len(first["unrouted"]); n != 3 {
		t.Fatalf("receipt without routes: %d keys %q, want 3 (receipt, two index keys)", n, first["unrouted"])
	}

	at(1.05)
	decideAt(delivery("redelivered", "d-2", `{"n":3}`)) // now expires at 3
	// The receipt still expires at 2, its payload now at 3.
	if err := s.Redeliver(ctx, "billing", "requeued", "ledger"); err != nil {
		t.Fatal(err)
	}
	at(2.1)
	decideAt(delivery("again", "d-2", `{"n":4}`)) // a new receipt
	if err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	expectKeys(t, s, first, "deleted", "after Expire", "delivered", "unrouted")
	expectKeys(t, s, first, "present", "after Expire", "redelivered", "requeued")
	if _, err := s.Receipt(ctx, "billing", "requeued"); webhookd.ErrorCode(err) != webhookd.ENOTFOUND {
		t.Errorf("receipt of requeued past its TTL: %v, want not found", err)
	}
	for _, k := range first["again"] {
		want := "deleted"
		if k[0] == prefixReceipt || k[0] == prefixPayload {
			want = "present" // the new receipt's
		}
		if state := newestVersion(t, s, k); state != want {
			t.Errorf("key %q of a request ID accepted again: %s, want %s", k, state, want)
		}
	}
	if r := receiptOf(t, s, "again"); len(r.Deliveries) != 1 || r.Deliveries[0].DeliveryID != "d-2" {
		t.Errorf("the new receipt under an expired request ID: %+v", r.Deliveries)
	}
	if got := searchIDs(t, s); len(got) != 2 {
		t.Errorf("receipts found after Expire: %q, want redelivered and again", got)
	}

	// Both were passed over; the next pass reads them again.
	at(3.1)
	if err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	expectKeys(t, s, first, "deleted", "once it expired", "redelivered", "requeued")
}

// keysOf returns the keys of each of requestIDs' receipts: the receipt,
// its index keys, its payload and its forward statuses, as present now.
func keysOf(t *testing.T, s *Store, requestIDs ...string) map[string][][]byte {
	t.Helper()
	keys := map[string][][]byte{}
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			var id string
			switch k[0] {
			case prefixByTime, prefixBySrc:
				pos, _ := indexPos(k)
				id = pos.requestID
			case prefixReceipt, prefixPayload, prefixForward:
				_, rest, _ := bytes.Cut(k, []byte{0})
				id = string(bytes.SplitN(rest, []byte{0}, 2)[0])
			}
			if slices.Contains(requestIDs, id) {
				keys[id] = append(keys[id], k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// expectKeys checks that the newest version of each key of ids is want.
func expectKeys(t *testing.T, s *Store, keys map[string][][]byte, want, when string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		for _, k := range keys[id] {
			if state := newestVersion(t, s, k); state != want {
				t.Errorf("%s's key %q %s: %s, want %s", id, k, when, state, want)
			}
		}
	}
}

// newestVersion says what the newest version of key is: "present",
// "deleted" or "absent".
func newestVersion(t *testing.T, s *Store, key []byte) string {
	t.Helper()
	state := "absent"
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{AllVersions: true})
		defer it.Close()
		if it.Seek(key); it.Valid() && bytes.Equal(it.Item().Key(), key) {
			state = "present"
			if it.Item().ExpiresAt() == 0 {
				state = "deleted"
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// searchIDs returns the request IDs a search of every receipt finds.
func searchIDs(t *testing.T, s *Store) (ids []string) {
	t.Helper()
	rs, _, err := s.Receipts(ctx, storage.ReceiptQuery{Page: storage.Page{Limit: storage.MaxLimit}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		ids = append(ids, r.RequestID)
	}
	return ids
}

// TestExpireReadsInBatches expires more receipts than one read collects.
func TestExpireReadsInBatches(t *testing.T) {
	s, decideAt, at := clocked(t)
	at(0.05)
	const n = 2*expireBatch + 3
	for i := range n {
		d := delivery(fmt.Sprint("req-", i), "d-1", "{}")
		d.Forward, d.Routes = false, nil
		decideAt(d)
	}
	keys := keysOf(t, s, "req-0", fmt.Sprint("req-", n-1))
	if len(keys) != 2 {
		t.Fatalf("keys of the first and last receipts: %q", keys)
	}
	at(2.1)
	if err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	expectKeys(t, s, keys, "deleted", "after Expire", "req-0", fmt.Sprint("req-", n-1))
}

// TestExpireRereadsTheIndexHourly retries a dead letter whose receipt
// expired and was deleted: the retry writes the receipt's index keys
// again, behind where the passes have read to, with the payload it sends
// from. The pass an hour on reads the index from its beginning and
// deletes them once they expire.
func TestExpireRereadsTheIndexHourly(t *testing.T) {
	s, decideAt, at := clocked(t)
	at(0.05)
	decideAt(delivery("dead", "d-1", `{"n":1}`))
	settle(t, s, outbox(t, s)[0], forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 500, At: time.Now()})
	at(2.1)
	if err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	if err := s.RetryDeadLetter(ctx, ledger, "dead"); err != nil {
		t.Fatal(err)
	}
	retried := keysOf(t, s, "dead")
	if len(retried["dead"]) != 4 {
		t.Fatalf("keys after the retry: %q, want the payload, its forward status and two index keys", retried["dead"])
	}
	for _, sec := range []float64{4.1, 3603} {
		at(sec)
		if err := s.Expire(); err != nil {
			t.Fatal(err)
		}
	}
	expectKeys(t, s, retried, "deleted", "after the hourly pass", "dead")
}

// TestExpireDeletesEveryRoutesStatusAfterARetry retries the dead letter of
// one of a receipt's two routes after the receipt expired, before a pass
// deleted it. The retry writes the receipt's index key again, which still
// names both routes, so that the pass deletes the other route's status
// too once the retried one expires.
func TestExpireDeletesEveryRoutesStatusAfterARetry(t *testing.T) {
	s, decideAt, at := clocked(t)
	at(0.05)
	d := delivery("two", "d-1", `{"n":1}`)
	d.Routes = []string{"ledger", "audit"}
	decideAt(d)
	for _, e := range outbox(t, s) {
		state := webhookd.ForwardDelivered
		if e.Route == "ledger" {
			state = webhookd.ForwardDead
		}
		settle(t, s, e, forward.Result{State: state, Attempts: 1, Status: 500, At: time.Now()})
	}
	at(2.1)
	if err := s.RetryDeadLetter(ctx, ledger, "two"); err != nil {
		t.Fatal(err)
	}
	keys := keysOf(t, s, "two")
	statuses := 0
	for _, k := range keys["two"] {
		if k[0] == prefixForward {
			statuses++
		}
	}
	if statuses != 2 {
		t.Fatalf("keys after the retry: %q, want both routes' forward statuses", keys["two"])
	}
	at(4.1)
	if err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	expectKeys(t, s, keys, "deleted", "once the retry expired", "two")
}

func TestIndexValueNamesTheRoutes(t *testing.T) {
	for _, names := range [][]string{nil, {"ledger"}, {"ledger", "audit", ""}} {
		got, err := readRoutes(appendRoutes(nil, names))
		if err != nil || !slices.Equal(got, names) {
			t.Errorf("readRoutes(appendRoutes(%q)) = %q, %v", names, got, err)
		}
	}
	for _, bad := range [][]byte{{2, 1, 'a'}, {1, 5, 'a'}, {1, 1, 'a', 'b'}, {200}} {
		if got, err := readRoutes(bad); err == nil {
			t.Errorf("readRoutes(%q) = %q, want an error", bad, got)
		}
	}
}
