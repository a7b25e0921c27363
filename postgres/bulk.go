package postgres

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/versioning"
)

// Bulk repairs of dead letters, a page a transaction.
const (
	// pageDeadLetters reads the keys of a page, oldest accepted first, by
	// the index on created_at: $1 source, $2 route, each '' for all,
	// after the key $3-$6, died in [$7, $8), $9 rows. It locks nothing:
	// the page locks receipts before dead letters, as a single repair.
	pageDeadLetters = `SELECT created_at, source, route, request_id FROM webhookd_dead_letters
	WHERE (created_at, source, route, request_id) > ($3, $4, $5, $6) AND ($1 = '' OR source = $1) AND ($2 = '' OR route = $2)
		AND dead_at >= $7 AND dead_at < $8
	ORDER BY created_at, source, route, request_id LIMIT $9`

	// lockReceipts locks the live receipts of $1 sources and $2 request
	// IDs, one primary-key lookup each (see readReceipts), in the order
	// given. $3 now.
	lockReceipts = `SELECT r.* FROM unnest($1::text[], $2::text[]) AS k(s, id)
	JOIN LATERAL (SELECT ` + receiptColumns + ` FROM webhookd_receipts
		WHERE source = k.s AND request_id = k.id AND expires_at > $3 LIMIT 1 FOR UPDATE) r ON true`

	// lockDeadLetters locks the dead letters of the keys $1-$3, in the
	// order given, with their body when $4.
	lockDeadLetters = `SELECT d.* FROM unnest($1::text[], $2::text[], $3::text[]) AS k(s, r, id)
	JOIN LATERAL (SELECT 0, ` + entryColumns + `, dead_at, body IS NULL, CASE WHEN $4 THEN body END
		FROM webhookd_dead_letters WHERE source = k.s AND route = k.r AND request_id = k.id LIMIT 1 FOR UPDATE) d ON true`

	// lockLatests is readLatest holding the rows, as lockLatest.
	lockLatests = `SELECT l.source, l.resource, l.version, l.ord, l.request_id, l.updated_at
	FROM unnest($1::text[], $2::text[]) AS k(s, res)
	JOIN LATERAL (SELECT * FROM webhookd_latest l WHERE l.source = k.s AND l.resource = k.res LIMIT 1 FOR SHARE) l ON true`

	// deleteDeadLetters deletes the dead letters of the keys $1-$3.
	deleteDeadLetters = `DELETE FROM webhookd_dead_letters d USING unnest($1::text[], $2::text[], $3::text[]) AS k(s, r, id)
	WHERE d.source = k.s AND d.route = k.r AND d.request_id = k.id`

	// mergeManyRoutes is mergeRoutes for the receipts $1-$3 (sources,
	// request IDs, first seen) and their objects $4.
	mergeManyRoutes = `UPDATE webhookd_receipts r SET routes = r.routes || k.rt::jsonb
	FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[]) AS k(s, id, fs, rt)
	WHERE r.source = k.s AND r.request_id = k.id AND r.first_seen = k.fs`
)

// bulkKey is a bulk repair's cursor.
type bulkKey struct {
	Created   time.Time `json:"t"`
	Source    string    `json:"s"`
	Route     string    `json:"r"`
	RequestID string    `json:"id"`
}

// deadKey names a dead letter.
type deadKey struct{ source, route, id string }

func compareDeadKeys(a, b deadKey) int {
	return cmp.Or(cmp.Compare(a.source, b.source), cmp.Compare(a.route, b.route), cmp.Compare(a.id, b.id))
}

// RetryDeadLetters retries a page of the dead letters q selects, oldest
// accepted first, in one transaction, as RetryDeadLetter does each: those
// it refuses stay and are counted.
func (s *Store) RetryDeadLetters(ctx context.Context, q storage.DeadLetterQuery, page storage.Page) (storage.BulkResult, error) {
	res, err := s.bulk(ctx, q, page, true, func(tx pgx.Tx, p *bulkPage, now time.Time) (storage.BulkResult, error) {
		latest, err := p.lockLatest(ctx, tx)
		if err != nil {
			return storage.BulkResult{}, err
		}
		var res storage.BulkResult
		var retried []*forward.Entry
		for _, e := range p.dead {
			held := p.held[key{e.Source, e.RequestID}]
			if forward.CanRetry(e, held) != nil || forward.CanResend(e, latest[key{e.Source, e.Resource}]) != nil {
				res.Refused++
				continue
			}
			retried = append(retried, e)
		}
		res.Done = len(retried)
		return res, s.requeueDead(ctx, tx, p, retried, now)
	})
	if err != nil {
		return storage.BulkResult{}, fmt.Errorf("retry dead letters: %w", err)
	}
	return res, nil
}

// DiscardDeadLetters discards a page of the dead letters q selects, as
// RetryDeadLetters pages them, in one transaction; each receipt says so
// of its route, as DiscardDeadLetter does.
func (s *Store) DiscardDeadLetters(ctx context.Context, q storage.DeadLetterQuery, page storage.Page) (storage.BulkResult, error) {
	res, err := s.bulk(ctx, q, page, false, func(tx pgx.Tx, p *bulkPage, now time.Time) (storage.BulkResult, error) {
		changed := make(map[key][]string)
		for _, e := range p.dead {
			held := p.held[key{e.Source, e.RequestID}]
			if status, ok := forward.Discarded(e, held); ok {
				held.Route(e.Route).ForwardStatus = status
				changed[key{e.Source, e.RequestID}] = append(changed[key{e.Source, e.RequestID}], e.Route)
			}
		}
		return storage.BulkResult{Done: len(p.dead)}, p.write(ctx, tx, p.dead, changed)
	})
	if err != nil {
		return storage.BulkResult{}, fmt.Errorf("discard dead letters: %w", err)
	}
	return res, nil
}

// bulkPage is one page of a bulk repair, locked.
type bulkPage struct {
	// dead are the page's dead letters still there once locked, oldest
	// accepted first.
	dead []*forward.Entry
	// held are the live receipts of their request IDs.
	held map[key]*dedupe.Receipt
}

// bulk runs one page of a bulk repair in a transaction: it reads the
// page's keys, locks their receipts and then their dead letters (with
// their bodies when withBody), each set in key order, as a decision and a
// single repair lock them, and hands them to fn. A page that meets a
// deadlock or a serialization failure is tried again.
func (s *Store) bulk(ctx context.Context, q storage.DeadLetterQuery, page storage.Page, withBody bool,
	fn func(tx pgx.Tx, p *bulkPage, now time.Time) (storage.BulkResult, error)) (storage.BulkResult, error) {
	from := bulkKey{}
	after := bound(time.Time{}, pgtype.NegativeInfinity)
	if page.Cursor != "" {
		if err := decodeCursor(page.Cursor, &from); err != nil {
			return storage.BulkResult{}, err
		}
		after = bound(from.Created, pgtype.NegativeInfinity)
	}
	since, until := bound(q.Since, pgtype.NegativeInfinity), bound(q.Until, pgtype.Infinity)
	n := page.Size()
	var res storage.BulkResult
	for attempt := 1; ; attempt++ {
		err := s.repair(ctx, func(tx pgx.Tx, now time.Time) error {
			if err := bulkPlanning(ctx, tx); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, pageDeadLetters, q.Target.Source, q.Target.Route, after, from.Source, from.Route,
				from.RequestID, since, until, n+1)
			if err != nil {
				return err
			}
			var keys []bulkKey
			var k bulkKey
			if _, err := pgx.ForEachRow(rows, []any{&k.Created, &k.Source, &k.Route, &k.RequestID}, func() error {
				keys = append(keys, k)
				return nil
			}); err != nil {
				return err
			}
			next := ""
			if len(keys) > n {
				keys, next = keys[:n], encodeCursor(keys[n-1])
			}
			p, err := lockPage(ctx, tx, keys, withBody, now)
			if err != nil {
				return err
			}
			res, err = fn(tx, p, now)
			res.Next = next
			return err
		})
		if !retryable(err) || attempt == maxConflicts {
			return res, err
		}
	}
}

// bulkPlanning sets how the rest of a bulk page's transaction is planned:
// without sorts, so that the page walks the index on created_at from its
// cursor (see withIndexOrder), and without hash joins, so that the
// statements over the page's key arrays look each key up by its primary
// key. On tables never analyzed the planner underestimates their rows and
// would hash the keys against a scan of the whole table.
func bulkPlanning(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, bulkPlans)
	return err
}

// lockPage locks the receipts, then the dead letters, of keys.
func lockPage(ctx context.Context, tx pgx.Tx, keys []bulkKey, withBody bool, now time.Time) (*bulkPage, error) {
	p := &bulkPage{held: make(map[key]*dedupe.Receipt)}
	ids, dead := make(map[key]bool), make(map[deadKey]*forward.Entry)
	for _, k := range keys {
		ids[key{k.Source, k.RequestID}] = true
		dead[deadKey{k.Source, k.Route, k.RequestID}] = nil
	}
	var sources, requestIDs []string
	for _, k := range slices.SortedFunc(maps.Keys(ids), compareKeys) {
		sources, requestIDs = append(sources, k.source), append(requestIDs, k.id)
	}
	rows, err := tx.Query(ctx, lockReceipts, sources, requestIDs, now)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		r, err := scanReceipt(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		p.held[key{r.Source, r.RequestID}] = r
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var routes []string
	sources, requestIDs = sources[:0], requestIDs[:0]
	for _, k := range slices.SortedFunc(maps.Keys(dead), compareDeadKeys) {
		sources, routes, requestIDs = append(sources, k.source), append(routes, k.route), append(requestIDs, k.id)
	}
	rows, err = tx.Query(ctx, lockDeadLetters, sources, routes, requestIDs, withBody)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var deadAt time.Time
		var lost bool
		var body []byte
		e, err := scanEntry(rows, &deadAt, &lost, &body)
		if err != nil {
			rows.Close()
			return nil, err
		}
		deadAt = deadAt.UTC()
		e.DeadAt, e.BodyLost, e.Body = &deadAt, lost, body
		dead[deadKey{e.Source, e.Route, e.RequestID}] = &e
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, k := range keys {
		// A dead letter another repair took meanwhile is no longer there.
		if e := dead[deadKey{k.Source, k.Route, k.RequestID}]; e != nil {
			p.dead = append(p.dead, e)
		}
	}
	return p, nil
}

// lockLatest locks, in key order, the latest versions of the resources of
// the page's dead letters that have one.
func (p *bulkPage) lockLatest(ctx context.Context, tx pgx.Tx) (map[key]*versioning.Latest, error) {
	wanted := make(map[key]bool)
	for _, e := range p.dead {
		if e.Resource != "" && e.Version != "" {
			wanted[key{e.Source, e.Resource}] = true
		}
	}
	latest := make(map[key]*versioning.Latest, len(wanted))
	if len(wanted) == 0 {
		return latest, nil
	}
	var sources, resources []string
	for _, k := range slices.SortedFunc(maps.Keys(wanted), compareKeys) {
		sources, resources = append(sources, k.source), append(resources, k.id)
	}
	rows, err := tx.Query(ctx, lockLatests, sources, resources)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var source, resource string
		l, err := scanLatest(rows, &source, &resource)
		if err != nil {
			rows.Close()
			return nil, err
		}
		latest[key{source, resource}] = l
	}
	return latest, rows.Err()
}

// requeueDead puts retried, dead letters of the page, back at the end of
// the outbox, in the page's order, which is each lane's: the entries of
// one request share one payload, and each route is pending again on the
// receipt when it is the entry's.
func (s *Store) requeueDead(ctx context.Context, tx pgx.Tx, p *bulkPage, retried []*forward.Entry, now time.Time) error {
	var order []key
	requests := make(map[key][]forward.Entry)
	changed := make(map[key][]string)
	for _, e := range retried {
		k := key{e.Source, e.RequestID}
		if requests[k] == nil {
			order = append(order, k)
		}
		fresh, status := forward.Requeue(*e, now)
		requests[k] = append(requests[k], fresh)
		if held := p.held[k]; held != nil && held.FirstSeen.Equal(e.CreatedAt) {
			if rs := held.Route(e.Route); rs != nil {
				rs.ForwardStatus = status
				changed[k] = append(changed[k], e.Route)
			}
		}
	}
	if err := p.write(ctx, tx, retried, changed); err != nil {
		return err
	}
	w := &writes{now: now}
	for _, k := range order {
		w.enqueue(requests[k], now.Add(s.ReceiptTTL))
	}
	return w.send(ctx, tx)
}

// write deletes the dead letters done and merges the route statuses
// changed into their receipts, which the page holds locked.
func (p *bulkPage) write(ctx context.Context, tx pgx.Tx, done []*forward.Entry, changed map[key][]string) error {
	var sources, routes, ids []string
	for _, e := range done {
		sources, routes, ids = append(sources, e.Source), append(routes, e.Route), append(ids, e.RequestID)
	}
	if _, err := tx.Exec(ctx, deleteDeadLetters, sources, routes, ids); err != nil {
		return err
	}
	sources, ids = sources[:0], ids[:0]
	var firstSeen []time.Time
	var objects []string
	for _, k := range slices.SortedFunc(maps.Keys(changed), compareKeys) {
		held := p.held[k]
		sources, ids = append(sources, held.Source), append(ids, held.RequestID)
		firstSeen, objects = append(firstSeen, held.FirstSeen), append(objects, routesJSON(held.Routes, changed[k]))
	}
	_, err := tx.Exec(ctx, mergeManyRoutes, sources, ids, firstSeen, objects)
	return err
}
