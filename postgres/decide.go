package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
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
// resource's latest version and the outbox entry, in one transaction. It
// returns once that transaction has committed.
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
		{"version", d.Version}, {"Content-Type", d.ContentType}} {
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
	for {
		select {
		case o := <-s.decisions:
			batch = drain(s.decisions, append(batch[:0], o), s.MaxBatch)
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

// decideBatch decides ops in one transaction and answers them.
func (s *Store) decideBatch(ops []*decideOp) {
	var err error
	for attempt := 1; ; attempt++ {
		err = s.tryDecide(ops)
		if !errors.Is(err, errConflict) || attempt == maxConflicts {
			break
		}
	}
	s.observe(err)
	if err != nil {
		s.Logger.Error("decide batch", zap.Int("ops", len(ops)), zap.Error(err))
		err = unavailable(err)
	} else {
		signal(s.notify)
	}
	for _, o := range ops {
		o.done <- err
	}
}

// held is what the batch knows of one receipt: as read, then as the
// batch's earlier operations wrote it.
type held struct {
	r *dedupe.Receipt // nil when absent
	// inDB says a live row exists: an operation writing r updates it, on
	// the condition that its attempts are still what the batch knows.
	inDB bool
}

// latestOf is what the batch knows of one resource's latest version.
type latestOf struct {
	l *versioning.Latest // nil when none
}

type key struct{ source, id string }

// tryDecide reads what ops depend on, plans each in turn over what the
// ones before it planned (dedupe.Decide), writes the plans and commits.
// A later operation sees the earlier ones' writes, as one after the other.
func (s *Store) tryDecide(ops []*decideOp) error {
	ctx, cancel := s.background()
	defer cancel()
	now := s.Now()
	return s.inTx(ctx, func(tx pgx.Tx) error { return s.planBatch(ctx, tx, ops, now) })
}

// planBatch is tryDecide's transaction.
func (s *Store) planBatch(ctx context.Context, tx pgx.Tx, ops []*decideOp, now time.Time) error {
	receipts, latest, err := s.readBatch(ctx, tx, ops, now)
	if err != nil {
		return err
	}

	w := &writes{}
	for _, o := range ops {
		d := o.d
		h := receipts[key{d.Source, d.RequestID}]
		var l *latestOf
		if resource := dedupe.LatestFor(h.r, d); resource != "" {
			l = latest[key{d.Source, resource}]
			if l == nil { // a held receipt naming a resource no delivery of this batch named
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
		expiresAt := d.ReceivedAt.Add(s.ReceiptTTL)
		w.writeReceipt(h, p.Receipt, expiresAt, now)
		h.r, h.inDB = p.Receipt, true
		if p.Latest != nil {
			w.writeLatest(d.Source, d.Resource, l.l, p.Latest)
			l.l = p.Latest
		}
		if p.Enqueue {
			e := forward.NewEntry(d)
			if err := w.enqueue(&e, expiresAt); err != nil {
				return err
			}
		}
	}
	return w.send(ctx, tx)
}

// readBatch reads, in one round trip, the receipt of each operation's
// request ID and the latest version dedupe.LatestFor names for it.
func (s *Store) readBatch(ctx context.Context, tx pgx.Tx, ops []*decideOp, now time.Time) (map[key]*held, map[key]*latestOf, error) {
	sources, ids, resources := make([]string, len(ops)), make([]string, len(ops)), make([]string, len(ops))
	receipts := make(map[key]*held, len(ops))
	latest := make(map[key]*latestOf)
	for i, o := range ops {
		sources[i], ids[i] = o.d.Source, o.d.RequestID
		if o.d.Version != "" {
			resources[i] = o.d.Resource
		}
		receipts[key{o.d.Source, o.d.RequestID}] = &held{}
	}
	b := &pgx.Batch{}
	b.Queue(readReceipts, sources, ids, now)
	b.Queue(readLatest, sources, ids, resources, now)
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	rows, err := res.Query()
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		r, err := scanReceipt(rows)
		if err != nil {
			rows.Close()
			return nil, nil, err
		}
		receipts[key{r.Source, r.RequestID}] = &held{r: r, inDB: true}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	rows, err = res.Query()
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
		latest[key{source, resource}] = &latestOf{l: l}
	}
	return receipts, latest, rows.Err()
}

// writes is a batch's statements, grouped so that every transaction takes
// row locks in one order: receipts, latest versions, outbox, payloads,
// each by key. Two batches on two replicas then never wait on each other
// in a cycle.
type writes struct {
	receipts, latest, outbox, payloads []stmt
}

type stmt struct {
	key  key
	sql  string
	args []any
	// want is how many rows the statement must affect; fewer means the
	// batch read something another transaction has changed since.
	want int64
}

func (w *writes) writeReceipt(h *held, r *dedupe.Receipt, expiresAt, now time.Time) {
	k := key{r.Source, r.RequestID}
	if !h.inDB {
		deliveries, _ := json.Marshal(r.Deliveries)
		w.receipts = append(w.receipts, stmt{key: k, sql: insertReceipt, want: 1, args: []any{
			r.Source, r.RequestID, r.Resource, r.Version, string(r.Decision), string(r.DuplicateDecision),
			r.OrderingDecision, r.LatestVersionAtDecision, r.PayloadSHA256, r.FirstSeen, r.LastSeen,
			r.Attempts, deliveries, string(r.Forward.State), expiresAt, now}})
		return
	}
	deliveries, _ := json.Marshal(r.Deliveries)
	w.receipts = append(w.receipts, stmt{key: k, sql: updateReceipt, want: 1, args: []any{
		r.Source, r.RequestID, r.FirstSeen, h.r.Attempts, r.Attempts, r.LastSeen, deliveries, expiresAt}})
}

func (w *writes) writeLatest(source, resource string, was, l *versioning.Latest) {
	var wasOrd *int64
	if was != nil {
		o := ord(was.Order)
		wasOrd = &o
	}
	w.latest = append(w.latest, stmt{key: key{source, resource}, sql: upsertLatest, want: 1, args: []any{
		source, resource, l.Version, ord(l.Order), l.RequestID, l.UpdatedAt, wasOrd}})
}

func (w *writes) enqueue(e *forward.Entry, expiresAt time.Time) error {
	headers, err := json.Marshal(e.Headers)
	if err != nil {
		return err
	}
	k := key{e.Source, e.RequestID}
	w.outbox = append(w.outbox, stmt{key: k, sql: insertOutbox, want: 1, args: []any{
		e.Source, e.RequestID, e.Resource, e.Version, e.ContentType, headers, e.CreatedAt, e.NextAttemptAt}})
	body := e.Body
	if body == nil {
		body = []byte{}
	}
	w.payloads = append(w.payloads, stmt{key: k, sql: upsertPayload, want: 1, args: []any{
		e.Source, e.RequestID, e.Resource, e.Version, e.ContentType, headers, e.CreatedAt, body, expiresAt}})
	return nil
}

// send sends the statements in one round trip, and fails with errConflict
// unless each affected the rows its plan needs.
func (w *writes) send(ctx context.Context, tx pgx.Tx) error {
	byKey := func(a, b stmt) int {
		return cmp.Or(cmp.Compare(a.key.source, b.key.source), cmp.Compare(a.key.id, b.key.id))
	}
	// Stable: statements on one row keep the order the plans need. The
	// outbox keeps arrival order, which is each lane's version order.
	slices.SortStableFunc(w.receipts, byKey)
	slices.SortStableFunc(w.latest, byKey)
	slices.SortStableFunc(w.payloads, byKey)
	all := slices.Concat(w.receipts, w.latest, w.outbox, w.payloads)
	b := &pgx.Batch{}
	for _, st := range all {
		b.Queue(st.sql, st.args...)
	}
	res := tx.SendBatch(ctx, b)
	var conflict bool
	for _, st := range all {
		tag, err := res.Exec()
		if err != nil {
			res.Close()
			return err
		}
		if tag.RowsAffected() < st.want {
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
