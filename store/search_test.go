package store

import (
	"slices"
	"testing"
	"time"

	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/storage"
)

func searchAll(t *testing.T, s *Store, q storage.ReceiptQuery) []string {
	t.Helper()
	var ids []string
	for {
		items, next, err := s.Receipts(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range items {
			ids = append(ids, r.Source+"/"+r.RequestID+"@"+r.FirstSeen.Format(time.RFC3339Nano))
		}
		if next == "" {
			return ids
		}
		q.Cursor = next
	}
}

// A redelivery extends its receipt's TTL, and the index keys' with it;
// once they expire, the request ID comes back as a new receipt, found
// once.
func TestIndexKeysLiveAsLongAsTheirReceipt(t *testing.T) {
	s, decideAt, at := clocked(t)
	at(0.05)
	decideAt(delivery("req-1", "d-1", `{"n":1}`)) // expires at 2
	first := receiptOf(t, s, "req-1").FirstSeen
	at(1.05)
	decideAt(delivery("req-1", "d-2", `{"n":1}`)) // now expires at 3
	at(2.1)
	for _, q := range []storage.ReceiptQuery{{}, {Source: "billing"}} {
		if got := searchAll(t, s, q); !slices.Equal(got, []string{"billing/req-1@" + first.Format(time.RFC3339Nano)}) {
			t.Errorf("search %+v past the first delivery's TTL: %v, want req-1", q, got)
		}
	}
	at(3.1)
	if got := searchAll(t, s, storage.ReceiptQuery{}); len(got) != 0 {
		t.Errorf("search past the redelivery's TTL: %v", got)
	}
	decideAt(delivery("req-1", "d-3", `{"n":1}`))
	again := receiptOf(t, s, "req-1").FirstSeen
	for _, q := range []storage.ReceiptQuery{{}, {Source: "billing"}} {
		if got := searchAll(t, s, q); !slices.Equal(got, []string{"billing/req-1@" + again.Format(time.RFC3339Nano)}) {
			t.Errorf("search %+v after the request ID came back: %v, want its new receipt only", q, got)
		}
	}
}

// Index keys that name no receipt, or another receipt of their request
// ID, are passed over.
func TestSearchPassesOverIndexKeysWithoutTheirReceipt(t *testing.T) {
	s := openStore(t, t.TempDir())
	mustDecide(t, s, delivery("held", "d", "{}"))
	held := receiptOf(t, s, "held")
	err := s.update(func(t *tx) error {
		for _, p := range []receiptPos{
			{firstSeen: held.FirstSeen.Add(time.Second), source: "billing", requestID: "gone"},
			{firstSeen: held.FirstSeen.Add(-time.Second), source: "billing", requestID: "held"},
		} {
			t.setRaw(byTimeKey(p), nil, 0)
			t.setRaw(bySourceKey(p), nil, 0)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"billing/held@" + held.FirstSeen.Format(time.RFC3339Nano)}
	for _, q := range []storage.ReceiptQuery{{}, {Source: "billing"}, {Page: storage.Page{Limit: 1}}} {
		if got := searchAll(t, s, q); !slices.Equal(got, want) {
			t.Errorf("search %+v: %v, want %v", q, got, want)
		}
	}
}

// A cursor names a position in the order of receipts, not in one index:
// a search by source refuses one of another source.
func TestCursorOfAnotherSourceIsRefused(t *testing.T) {
	s := openStore(t, t.TempDir())
	for _, id := range []string{"a", "b"} {
		d := delivery(id, "d", id)
		d.Source = "shipping"
		mustDecide(t, s, d)
	}
	_, next, err := s.Receipts(ctx, storage.ReceiptQuery{Page: storage.Page{Limit: 1}})
	if err != nil || next == "" {
		t.Fatalf("first page: next %q, %v", next, err)
	}
	if _, _, err := s.Receipts(ctx, storage.ReceiptQuery{Source: "billing", Page: storage.Page{Cursor: next}}); err == nil {
		t.Error("billing's search took a cursor of shipping's")
	}
	items, _, err := s.Receipts(ctx, storage.ReceiptQuery{Source: "shipping", Page: storage.Page{Cursor: next}})
	if err != nil || len(items) != 1 || items[0].RequestID != "a" {
		t.Errorf("shipping's search after the cursor of all: %v, %v; want a", ids(items), err)
	}
}

func ids(rs []dedupe.Receipt) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.RequestID)
	}
	return out
}
