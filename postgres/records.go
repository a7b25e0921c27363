package postgres

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
)

// Lists page by keyset: a cursor is the key of the last item a page
// covered, and the next page starts after it by an index, so that a page
// costs the same however deep it is, and rows written meanwhile before
// the cursor are not seen twice.
const (
	// receiptsMatch is what a receipt search selects of the receipts the
	// index walk reads: $6 now, $7 decision, $8 resource, $9 route, $10
	// forward state, each '' for any.
	receiptsMatch = `expires_at > $6 AND ($7 = '' OR decision = $7) AND ($8 = '' OR resource = $8)
		AND ($9 = '' OR routes ? $9)
		AND ($10 = '' OR EXISTS (SELECT 1 FROM jsonb_each(routes) AS x(k, v) WHERE ($9 = '' OR k = $9) AND v ->> 'state' = $10))`

	// searchReceipts reads at most $5 receipts newest first from the
	// cursor ($1 first seen, $2 source, $3 request ID) down to $4 (since),
	// by the index on first_seen, and returns those that match, up to $11,
	// and the last one it read (last), matched or not, for the cursor of
	// a page the filters left short. The window and the outer ORDER BY
	// take the walk's order as it comes (withIndexOrder), so the
	// statement stops reading once it has $11 rows.
	searchReceipts = `SELECT ` + receiptColumns + `, matched, rn = $5 FROM (
		SELECT *, row_number() OVER (ORDER BY first_seen DESC, source DESC, request_id DESC) AS rn,
			` + receiptsMatch + ` AS matched
		FROM (SELECT * FROM webhookd_receipts WHERE (first_seen, source, request_id) < ($1, $2, $3) AND first_seen >= $4
			ORDER BY first_seen DESC, source DESC, request_id DESC LIMIT $5) walk
	) r WHERE matched OR rn = $5
	ORDER BY first_seen DESC, source DESC, request_id DESC LIMIT $11`

	// searchSourceReceipts is searchReceipts for one source ($2), by the
	// index on source and first_seen.
	searchSourceReceipts = `SELECT ` + receiptColumns + `, matched, rn = $5 FROM (
		SELECT *, row_number() OVER (ORDER BY first_seen DESC, request_id DESC) AS rn,
			` + receiptsMatch + ` AS matched
		FROM (SELECT * FROM webhookd_receipts WHERE source = $2 AND (first_seen, request_id) < ($1, $3) AND first_seen >= $4
			ORDER BY first_seen DESC, request_id DESC LIMIT $5) walk
	) r WHERE matched OR rn = $5
	ORDER BY first_seen DESC, request_id DESC LIMIT $11`

	// listOutbox: $1 source, $2 route, each '' for all, after seq $3, $4
	// entries.
	listOutbox = `SELECT seq, ` + entryColumns + ` FROM webhookd_outbox
	WHERE ($1 = '' OR source = $1) AND ($2 = '' OR route = $2) AND seq > $3 ORDER BY seq LIMIT $4`

	// listDeadLetters: $1 source, $2 route, each '' for all, after the
	// key $3-$5, $6 entries.
	listDeadLetters = `SELECT 0, ` + entryColumns + `, dead_at, body IS NULL FROM webhookd_dead_letters
	WHERE ($1 = '' OR source = $1) AND ($2 = '' OR route = $2) AND (source, route, request_id) > ($3, $4, $5)
	ORDER BY source, route, request_id LIMIT $6`
)

// receiptKey is a receipt search's cursor.
type receiptKey struct {
	Seen      time.Time `json:"t"`
	Source    string    `json:"s"`
	RequestID string    `json:"id"`
}

// Receipts returns a page of the receipts q selects, newest first, by
// first seen, source and request ID, and the cursor of the next page. It
// walks an index by first seen (of every source, or of q.Source) and reads
// at most storage.MaxExamined receipts a page: filters that select few of
// them give a short page, or an empty one, with a cursor to go on.
func (s *Store) Receipts(ctx context.Context, q storage.ReceiptQuery) ([]dedupe.Receipt, string, error) {
	if err := s.available(); err != nil {
		return nil, "", err
	}
	upper := bound(time.Time{}, pgtype.Infinity)
	var from receiptKey
	if q.Cursor != "" {
		if err := decodeCursor(q.Cursor, &from); err != nil {
			return nil, "", err
		}
		upper = bound(from.Seen, pgtype.Infinity)
	}
	// A key of first seen Until and the least source and request ID
	// bounds the walk to first seen < Until.
	if !q.Until.IsZero() && (q.Cursor == "" || !from.Seen.Before(q.Until)) {
		upper, from = bound(q.Until, pgtype.Infinity), receiptKey{}
	}
	since := bound(q.Since, pgtype.NegativeInfinity)
	sql := searchReceipts
	if q.Source != "" {
		sql, from.Source = searchSourceReceipts, q.Source
	}
	n := q.Size()
	items := []dedupe.Receipt{}
	var next string
	err := withIndexOrder(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, upper, from.Source, from.RequestID, since, storage.MaxExamined, s.Now(),
			string(q.Decision), q.Resource, q.Route, string(q.ForwardState), n+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var matched, last bool
			r, err := scanReceipt(rows, &matched, &last)
			if err != nil {
				return err
			}
			if matched && len(items) == n {
				next = receiptCursor(&items[n-1])
				break
			}
			if matched {
				items = append(items, *r)
			}
			if last {
				next = receiptCursor(r)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, "", fmt.Errorf("receipts: %w", unavailable(err))
	}
	return items, next, nil
}

func receiptCursor(r *dedupe.Receipt) string {
	return encodeCursor(receiptKey{Seen: r.FirstSeen, Source: r.Source, RequestID: r.RequestID})
}

// outboxKey is an outbox page's cursor.
type outboxKey struct {
	Seq int64 `json:"seq"`
}

// Outbox returns a page of the pending entries of target (forward.Target's
// empty fields for all), without bodies, in outbox order.
func (s *Store) Outbox(ctx context.Context, target forward.Target, page storage.Page) ([]forward.Entry, string, error) {
	var from outboxKey
	if err := decodeCursor(page.Cursor, &from); err != nil {
		return nil, "", err
	}
	n := page.Size()
	entries, err := s.entries(ctx, false, listOutbox, target.Source, target.Route, from.Seq, n+1)
	if err != nil {
		return nil, "", fmt.Errorf("outbox: %w", err)
	}
	var next string
	if len(entries) > n {
		entries, next = entries[:n], encodeCursor(outboxKey{Seq: int64(entries[n-1].Seq)})
	}
	return entries, next, nil
}

// deadLetterKey is a dead letter page's cursor.
type deadLetterKey struct {
	Source    string `json:"s"`
	Route     string `json:"r"`
	RequestID string `json:"id"`
}

// DeadLetters returns a page of the dead letters of target (empty fields
// as in Outbox), by source, route and request ID, without bodies.
func (s *Store) DeadLetters(ctx context.Context, target forward.Target, page storage.Page) ([]forward.Entry, string, error) {
	var from deadLetterKey
	if err := decodeCursor(page.Cursor, &from); err != nil {
		return nil, "", err
	}
	n := page.Size()
	entries, err := s.entries(ctx, true, listDeadLetters, target.Source, target.Route, from.Source, from.Route, from.RequestID, n+1)
	if err != nil {
		return nil, "", fmt.Errorf("dead letters: %w", err)
	}
	var next string
	if len(entries) > n {
		e := &entries[n-1]
		entries, next = entries[:n], encodeCursor(deadLetterKey{Source: e.Source, Route: e.Route, RequestID: e.RequestID})
	}
	return entries, next, nil
}

// entries reads the entries sql selects: outbox entries, or dead letters
// with when they died and whether their body is lost.
func (s *Store) entries(ctx context.Context, dead bool, sql string, args ...any) ([]forward.Entry, error) {
	if err := s.available(); err != nil {
		return nil, err
	}
	entries := []forward.Entry{}
	err := withIndexOrder(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e forward.Entry
			if dead {
				var deadAt time.Time
				var lost bool
				if e, err = scanEntry(rows, &deadAt, &lost); err != nil {
					return err
				}
				deadAt = deadAt.UTC()
				e.DeadAt, e.BodyLost = &deadAt, lost
			} else if e, err = scanEntry(rows); err != nil {
				return err
			}
			entries = append(entries, e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, unavailable(err)
	}
	return entries, nil
}

// bound is t as a bound of a range of times: none (the infinity given)
// when zero, and else rounded up to the microseconds the columns keep, so
// that a stored time t' is below it exactly when t' < t.
func bound(t time.Time, none pgtype.InfinityModifier) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: none, Valid: true}
	}
	return pgtype.Timestamptz{Time: t.Add(time.Microsecond - 1).Truncate(time.Microsecond), Valid: true}
}

// encodeCursor is the opaque form of a page's key: base64 of its JSON.
func encodeCursor(key any) string {
	b, _ := json.Marshal(key)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads a cursor encodeCursor made of a key of key's type
// into key; "" leaves it zero, the start of the list.
func decodeCursor(cursor string, key any) error {
	if cursor == "" {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err == nil {
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		err = d.Decode(key)
	}
	if err != nil {
		return webhookd.FieldErrorf("cursor", "not a cursor of this list: %v", err)
	}
	return nil
}
