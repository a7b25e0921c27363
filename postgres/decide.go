package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/versioning"
)

// decideOp is one delivery waiting for the decision writer.
type decideOp struct {
	d    *webhookd.Delivery
	out  webhookd.Outcome
	done chan error
}

// Decide makes the decision for d and writes it, with the receipt, the
// resource's latest version and, for an accepted delivery that is
// forwarded, an outbox entry for each route it names and their payload, in
// one transaction. It returns once that transaction has committed.
func (s *Store) Decide(ctx context.Context, d webhookd.Delivery) (webhookd.Outcome, error) {
	if err := checkText(&d); err != nil {
		return webhookd.Outcome{}, err
	}
	// PostgreSQL keeps microseconds: the batch's view of what it wrote
	// must be what a later read finds.
	d.ReceivedAt = d.ReceivedAt.Truncate(time.Microsecond).UTC()
	o := &decideOp{d: &d, done: make(chan error, 1)}
	if err := submit(s, s.decisions, o); err != nil {
		return webhookd.Outcome{}, err
	}
	if err := <-o.done; err != nil {
		return webhookd.Outcome{}, fmt.Errorf("decide %s/%s: %w", d.Source, d.RequestID, err)
	}
	return o.out, nil
}

// checkText refuses what a text column cannot hold: bytes that are not
// UTF-8, and NUL. The gateway refuses them in identifiers already; header
// values and content types come as the sender wrote them.
func checkText(d *webhookd.Delivery) error {
	check := func(field, v string) error {
		if !utf8.ValidString(v) || containsNUL(v) {
			return webhookd.FieldErrorf(field, "%s must be UTF-8 text without NUL bytes", field)
		}
		return nil
	}
	for _, f := range [][2]string{{"request_id", d.RequestID}, {"delivery_id", d.DeliveryID}, {"resource", d.Resource},
		{"version", d.Version}, {"Content-Type", d.ContentType}, {"traceparent", d.Trace}} {
		if err := check(f[0], f[1]); err != nil {
			return err
		}
	}
	for k, v := range d.Headers {
		if err := check(k, k+v); err != nil {
			return err
		}
	}
	return nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

func (s *Store) decideLoop() {
	defer s.wg.Done()
	batch := make([]*decideOp, 0, s.MaxBatch)
	busy := false
	for {
		select {
		case o := <-s.decisions:
			batch = collect(s.decisions, append(batch[:0], o), s.MaxBatch, busy, s.BatchDelay)
			busy = len(batch) > 1
			s.decideBatch(batch)
		case <-s.closing:
			// Close waited for submitters, so what is queued now is all there is.
			for len(s.decisions) > 0 {
				s.decideBatch(drain(s.decisions, batch[:0], s.MaxBatch))
			}
			return
		}
	}
}

// collect adds to batch the operations waiting, up to max. When busy (the
// writer's last batch had more than one), it first waits up to delay for
// more: under load, fewer and larger transactions commit more operations a
// second, as each commit waits for the database's disk, and a replica's
// decisions and settles, and other replicas', share it; idle, an operation
// is written at once.
func collect[T any](ch chan T, batch []T, max int, busy bool, delay time.Duration) []T {
	if !busy {
		return drain(ch, batch, max)
	}
	deadline := time.NewTimer(delay)
	defer deadline.Stop()
	for len(batch) < max {
		select {
		case o := <-ch:
			batch = append(batch, o)
		case <-deadline.C:
			return drain(ch, batch, max)
		}
	}
	return batch
}

// drain adds the operations already waiting, up to max: while one batch
// commits, the next one gathers.
func drain[T any](ch chan T, batch []T, max int) []T {
	for len(batch) < max {
		select {
		case o := <-ch:
			batch = append(batch, o)
		default:
			return batch
		}
	}
	return batch
}

// errConflict is a batch's plan meeting a write another transaction
// committed after the batch read: it is planned again from a fresh read.
var errConflict = errors.New("a concurrent transaction changed what the batch read")

// maxConflicts bounds how often a batch is planned again before its
// deliveries are answered 503, for their senders to try again.
const maxConflicts = 16

// retryable says whether a batch that failed with err is planned again at
// once: it met another transaction's writes (errConflict), or the database
// chose it to break a deadlock (40P01) or a serialization failure (40001,
// which a database running at serializable isolation answers under
// contention).
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40P01" || pgErr.Code == "40001"
	}
	return errors.Is(err, errConflict)
}

// decideBatch decides ops in one transaction and answers them.
func (s *Store) decideBatch(ops []*decideOp) {
	var err error
	for attempt := 1; ; attempt++ {
		err = s.tryDecide(ops)
		if !retryable(err) || attempt == maxConflicts {
			break
		}
	}
	s.observe(err)
	s.observeDecision(err)
	if err != nil {
		s.decideLog.Fail("decide batch", zap.Int("ops", len(ops)), zap.Error(err))
		err = unavailable(err)
	} else {
		s.decideLog.OK("decide batches complete again")
		signal(s.notify)
	}
	for _, o := range ops {
		o.done <- err
	}
}

// held is what the batch knows of one receipt: as read, then as the
// batch's earlier operations left it.
type held struct {
	read *dedupe.Receipt // nil when none was live
	r    *dedupe.Receipt // nil when none
	// expiresAt is when r expires, once the batch changed it.
	expiresAt time.Time
}

// latestOf is what the batch knows of one resource's latest version.
type latestOf struct {
	read, l *versioning.Latest // nil when none
}

type key struct{ source, id string }

func compareKeys(a, b key) int {
	return cmp.Or(cmp.Compare(a.source, b.source), cmp.Compare(a.id, b.id))
}

// tryDecide reads what ops depend on, plans each in turn over what the
// ones before it planned (dedupe.Decide), writes the plans and commits.
// A later operation sees the earlier ones' writes, as one after the other.
func (s *Store) tryDecide(ops []*decideOp) error {
	ctx, cancel := s.background()
	defer cancel()
	now := s.Now()
	return s.inTx(ctx, func(tx pgx.Tx) error {
		receipts, latest, err := s.readBatch(ctx, tx, ops, now)
		if err != nil {
			return err
		}
		var enqueued [][]forward.Entry
		for _, o := range ops {
			d := o.d
			h := receipts[key{d.Source, d.RequestID}]
			var l *latestOf
			if resource := dedupe.LatestFor(h.r, d); resource != "" {
				if l = latest[key{d.Source, resource}]; l == nil {
					l = &latestOf{}
					latest[key{d.Source, resource}] = l
				}
			}
			var current *versioning.Latest
			if l != nil {
				current = l.l
			}
			p := dedupe.Decide(h.r, current, d)
			o.out = p.Outcome
			h.r, h.expiresAt = p.Receipt, d.ReceivedAt.Add(s.ReceiptTTL)
			if p.Latest != nil {
				l.l = p.Latest
			}
			if p.Enqueue {
				es := make([]forward.Entry, len(d.Routes))
				for i, route := range d.Routes {
					es[i] = forward.NewEntry(d, route)
				}
				enqueued = append(enqueued, es)
			}
		}
		w := &writes{now: now}
		w.receipts(receipts)
		w.latest(latest)
		for _, es := range enqueued {
			w.enqueue(es, es[0].CreatedAt.Add(s.ReceiptTTL))
		}
		return w.send(ctx, tx)
	})
}

// readBatch reads the receipt of each operation's request ID, then the
// latest version of the resource dedupe.LatestFor names for it.
func (s *Store) readBatch(ctx context.Context, tx pgx.Tx, ops []*decideOp, now time.Time) (map[key]*held, map[key]*latestOf, error) {
	sources, ids := make([]string, len(ops)), make([]string, len(ops))
	receipts := make(map[key]*held, len(ops))
	for i, o := range ops {
		sources[i], ids[i] = o.d.Source, o.d.RequestID
		receipts[key{o.d.Source, o.d.RequestID}] = &held{}
	}
	rows, err := tx.Query(ctx, readReceipts, sources, ids, now)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		r, err := scanReceipt(rows)
		if err != nil {
			rows.Close()
			return nil, nil, err
		}
		receipts[key{r.Source, r.RequestID}] = &held{read: r, r: r}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	latest := make(map[key]*latestOf)
	wanted := make(map[key]bool)
	var latestSources, resources []string
	for _, o := range ops {
		k := key{o.d.Source, dedupe.LatestFor(receipts[key{o.d.Source, o.d.RequestID}].r, o.d)}
		if k.id != "" && !wanted[k] {
			wanted[k] = true
			latestSources, resources = append(latestSources, k.source), append(resources, k.id)
		}
	}
	if len(resources) == 0 {
		return receipts, latest, nil
	}
	rows, err = tx.Query(ctx, readLatest, latestSources, resources)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var source, resource string
		l, err := scanLatest(rows, &source, &resource)
		if err != nil {
			rows.Close()
			return nil, nil, err
		}
		latest[key{source, resource}] = &latestOf{read: l, l: l}
	}
	return receipts, latest, rows.Err()
}

// writes is what a batch writes, as arrays, one statement a table. Rows
// go in key order, so that every transaction locks receipts (with their
// routes' statuses), then latest versions, then payloads, each in one
// order: two batches on two replicas then never wait on each other in a
// cycle. Outbox entries keep the order they were planned in, which is each
// lane's version order; new entries lock no row another transaction holds.
type writes struct {
	now      time.Time
	insert   receiptRows // receipts none was live for
	update   receiptRows // receipts the batch read
	latestW  latestRows
	outbox   entryRows
	payloads []payload
}

// payload is the payload of one request's entries, which they share.
type payload struct {
	e         *forward.Entry
	expiresAt time.Time
}

type receiptRows struct {
	source, id, resource, version, decision, duplicate, ordering, latestAt, sha, deliveries, routes []string
	unrouted                                                                                        []bool
	firstSeen, lastSeen, expiresAt                                                                  []time.Time
	attempts, was                                                                                   []int
}

type latestRows struct {
	source, resource, version, id []string
	ord                           []int64
	was                           []*int64
	updatedAt                     []time.Time
}

// entryRows are outbox entries (route set) or payloads (route unused).
type entryRows struct {
	source, route, id, resource, version, contentType, headers, trace []string
	createdAt, due, expiresAt                                         []time.Time
	body                                                              [][]byte
}

// receipts adds the receipts the batch changed.
func (w *writes) receipts(m map[key]*held) {
	for _, k := range slices.SortedFunc(maps.Keys(m), compareKeys) {
		h := m[k]
		if h.r == nil || h.expiresAt.IsZero() {
			continue
		}
		r := h.r
		deliveries, _ := json.Marshal(r.Deliveries)
		rows := &w.insert
		if h.read != nil {
			rows = &w.update
			rows.was = append(rows.was, h.read.Attempts)
		}
		rows.source, rows.id = append(rows.source, r.Source), append(rows.id, r.RequestID)
		rows.resource, rows.version = append(rows.resource, r.Resource), append(rows.version, r.Version)
		rows.decision, rows.duplicate = append(rows.decision, string(r.Decision)), append(rows.duplicate, string(r.DuplicateDecision))
		rows.ordering, rows.latestAt = append(rows.ordering, r.OrderingDecision), append(rows.latestAt, r.LatestVersionAtDecision)
		rows.sha, rows.deliveries = append(rows.sha, r.PayloadSHA256), append(rows.deliveries, string(deliveries))
		rows.unrouted, rows.routes = append(rows.unrouted, r.Unrouted), append(rows.routes, routesJSON(r.Routes, nil))
		rows.firstSeen, rows.lastSeen = append(rows.firstSeen, r.FirstSeen), append(rows.lastSeen, r.LastSeen)
		rows.expiresAt, rows.attempts = append(rows.expiresAt, h.expiresAt), append(rows.attempts, r.Attempts)
	}
}

// latest adds the latest versions the batch moved.
func (w *writes) latest(m map[key]*latestOf) {
	for _, k := range slices.SortedFunc(maps.Keys(m), compareKeys) {
		l := m[k]
		if l.l == l.read {
			continue
		}
		var was *int64
		if l.read != nil {
			o := ord(l.read.Order)
			was = &o
		}
		rows := &w.latestW
		rows.source, rows.resource = append(rows.source, k.source), append(rows.resource, k.id)
		rows.version, rows.id = append(rows.version, l.l.Version), append(rows.id, l.l.RequestID)
		rows.ord, rows.was = append(rows.ord, ord(l.l.Order)), append(rows.was, was)
		rows.updatedAt = append(rows.updatedAt, l.l.UpdatedAt)
	}
}

// enqueue adds an outbox entry for each of es, the entries of one
// request, one a route, and their payload, which lives until expiresAt.
// A batch enqueues a request ID once at most: an accept holds its
// receipt, so no later operation of the batch accepts it again.
func (w *writes) enqueue(es []forward.Entry, expiresAt time.Time) {
	for i := range es {
		w.outbox.add(&es[i], time.Time{})
	}
	w.payloads = append(w.payloads, payload{e: &es[0], expiresAt: expiresAt})
}

// add appends e: its route for an outbox entry, its body for a payload.
func (rows *entryRows) add(e *forward.Entry, expiresAt time.Time) {
	headers, _ := json.Marshal(e.Headers)
	body := e.Body
	if body == nil {
		body = []byte{}
	}
	rows.source, rows.route, rows.id = append(rows.source, e.Source), append(rows.route, e.Route), append(rows.id, e.RequestID)
	rows.resource, rows.version = append(rows.resource, e.Resource), append(rows.version, e.Version)
	rows.contentType, rows.headers = append(rows.contentType, e.ContentType), append(rows.headers, string(headers))
	rows.trace = append(rows.trace, e.Trace)
	rows.createdAt, rows.due = append(rows.createdAt, e.CreatedAt), append(rows.due, e.NextAttemptAt)
	rows.expiresAt, rows.body = append(rows.expiresAt, expiresAt), append(rows.body, body)
}

// preparedWrites are the decision's writes whose plans read no table:
// they insert from their arrays and find conflicting rows through the
// primary key, the conflict's arbiter, so no statistics change their plan.
// Each is prepared on a connection at its first batch there, and
// PostgreSQL keeps its generic plan rather than plan it again for every
// batch. Statements that read a table (the two reads, updateReceipts,
// insertOutbox) are planned when they run.
var preparedWrites = [...]struct{ name, sql string }{
	{insertReceiptsStatement, insertReceipts},
	{upsertLatestStatement, upsertLatest},
	{upsertPayloadsStatement, upsertPayloads},
}

// send writes everything in one round trip, and fails with errConflict
// unless each statement wrote every row: one that did not meets a row
// another transaction changed since the batch read it.
func (w *writes) send(ctx context.Context, tx pgx.Tx) error {
	for _, p := range preparedWrites {
		if _, err := tx.Conn().Prepare(ctx, p.name, p.sql); err != nil {
			return err
		}
	}
	b := &pgx.Batch{}
	var want []int
	queue := func(n int, sql string, args ...any) {
		if n > 0 {
			b.Queue(sql, args...)
			want = append(want, n)
		}
	}
	r := &w.insert
	queue(len(r.source), insertReceiptsStatement, r.source, r.id, r.resource, r.version, r.decision, r.duplicate, r.ordering,
		r.latestAt, r.sha, r.firstSeen, r.lastSeen, r.attempts, r.deliveries, r.unrouted, r.routes, r.expiresAt, w.now)
	r = &w.update
	queue(len(r.source), updateReceipts, r.source, r.id, r.firstSeen, r.was, r.attempts, r.lastSeen, r.deliveries, r.expiresAt)
	l := &w.latestW
	queue(len(l.source), upsertLatestStatement, l.source, l.resource, l.version, l.ord, l.id, l.updatedAt, l.was)
	o := &w.outbox
	queue(len(o.source), insertOutbox, o.source, o.route, o.id, o.resource, o.version, o.contentType, o.headers, o.trace, o.createdAt, o.due)
	slices.SortFunc(w.payloads, func(a, b payload) int {
		return compareKeys(key{a.e.Source, a.e.RequestID}, key{b.e.Source, b.e.RequestID})
	})
	p := &entryRows{}
	for _, pl := range w.payloads {
		p.add(pl.e, pl.expiresAt)
	}
	queue(len(p.source), upsertPayloadsStatement, p.source, p.id, p.resource, p.version, p.contentType, p.headers, p.trace, p.createdAt, p.body, p.expiresAt)
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	conflict := false
	for _, n := range want {
		tag, err := res.Exec()
		if err != nil {
			return err
		}
		if tag.RowsAffected() < int64(n) {
			conflict = true
		}
	}
	if err := res.Close(); err != nil {
		return err
	}
	if conflict {
		return errConflict
	}
	return nil
}

// ord maps a version's unsigned order onto bigint with the order kept.
func ord(u uint64) int64 { return int64(u ^ 1<<63) }

// unord is ord's inverse.
func unord(o int64) uint64 { return uint64(o) ^ 1<<63 }
