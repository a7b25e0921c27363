package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/webhookd/webhookd/forward"
)

// Claim hands owner up to n of target's due lane heads, each for lease
// (forward.Queue). The lease is a row's lease columns: any replica's
// claim honours it, and once it ends any replica may claim the entry.
func (s *Store) Claim(ctx context.Context, owner string, target forward.Target, n int, lease time.Duration) ([]forward.Claim, error) {
	if err := s.available(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	now := s.Now().Truncate(time.Microsecond)
	until := now.Add(lease)
	claims, err := s.leaseHeads(ctx, owner, target, n, now, until)
	if err != nil {
		s.observe(err)
		return nil, fmt.Errorf("claim %s: %w", target, unavailable(err))
	}
	// The statement returns rows in no particular order.
	slices.SortFunc(claims, func(a, b forward.Claim) int {
		return cmp.Or(a.NextAttemptAt.Compare(b.NextAttemptAt), cmp.Compare(a.Seq, b.Seq))
	})
	return claims, nil
}

// leaseHeads runs the claim statement and reads what it leased, in one
// round trip: a batch is one transaction, committed at its end. The
// statement is planned without its parameters' values: its generic plan
// walks the due index in order and stops at the limit, whatever the
// backlog; a plan for the values at hand, on an outbox never analyzed,
// guesses a handful of due entries, so it reads every due entry of the
// target and sorts them, for every claim. It is prepared once on each
// connection, so that the plan is made once, not at every claim, where
// planning cost as much as running it: a plan of index walks only, it
// suits the outbox at any size, and PostgreSQL plans it again when a
// VACUUM or ANALYZE changes the outbox's statistics.
func (s *Store) leaseHeads(ctx context.Context, owner string, target forward.Target, n int, now, until time.Time) ([]forward.Claim, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	if _, err := conn.Conn().Prepare(ctx, claimStatement, claim); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	b.Queue(forceGenericPlans)
	b.Queue(claimStatement, target.Source, now, n, owner, until, target.Route)
	res := conn.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return nil, err
	}
	rows, err := res.Query()
	if err != nil {
		return nil, err
	}
	claims, err := scanClaims(rows, owner, until)
	if err != nil {
		return nil, err
	}
	return claims, res.Close()
}

// withIndexOrder runs fn in a transaction whose statements read rows in
// the order an index keeps them rather than sort them. A page of a list
// needs it: it walks an index from its cursor and stops at its limit,
// but on tables never analyzed the planner guesses that few rows follow
// the cursor, and plans to fetch all of them and sort, which costs a scan
// of everything after the cursor for every page.
func withIndexOrder(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, noSorts); err != nil {
			return err
		}
		return fn(tx)
	})
}

func scanClaims(rows pgx.Rows, owner string, until time.Time) ([]forward.Claim, error) {
	defer rows.Close()
	var claims []forward.Claim
	for rows.Next() {
		c := forward.Claim{Owner: owner, Until: until}
		var token int64
		var body []byte
		var err error
		if c.Entry, err = scanEntry(rows, &token, &body, &c.Newer); err != nil {
			return nil, err
		}
		c.Token, c.Body = uint64(token), body
		claims = append(claims, c)
	}
	return claims, rows.Err()
}

// Pending returns how many entries wait to be forwarded, by target.
func (s *Store) Pending(ctx context.Context) (map[forward.Target]int, error) {
	return s.counts(ctx, "outbox")
}

// DeadLetterCounts returns how many dead letters each target has.
func (s *Store) DeadLetterCounts() (map[forward.Target]int, error) {
	ctx, cancel := s.background()
	defer cancel()
	return s.counts(ctx, "dead")
}

// counts adds up the count rows of kind by target.
func (s *Store) counts(ctx context.Context, kind string) (map[forward.Target]int, error) {
	if err := s.available(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, sumCounts, kind)
	if err != nil {
		return nil, unavailable(err)
	}
	counts := make(map[forward.Target]int)
	var t forward.Target
	var n int
	_, err = pgx.ForEachRow(rows, []any{&t.Source, &t.Route, &n}, func() error {
		counts[t] = n
		return nil
	})
	if err != nil {
		return nil, unavailable(err)
	}
	return counts, nil
}

// settleOp is one Settle waiting for the settle writer.
type settleOp struct {
	c    forward.Claim
	r    forward.Result
	done chan error
}

// Settle records what became of the claimed entry (forward.Queue): the
// entry is removed (delivered, superseded), rescheduled (retrying) or moved
// to its route's dead letters with the body the claim carried (dead), and
// the receipt's status of the entry's route says so, in one transaction,
// if the claim's token is still the entry's. Settles group-commit as
// decisions do.
func (s *Store) Settle(ctx context.Context, c forward.Claim, r forward.Result) error {
	o := &settleOp{c: c, r: r, done: make(chan error, 1)}
	err := submit(s, s.settles, o)
	if err == nil {
		err = <-o.done
	}
	if err != nil {
		return fmt.Errorf("settle %s/%s: %w", c.Target(), c.RequestID, err)
	}
	return nil
}

func (s *Store) settleLoop() {
	defer s.wg.Done()
	batch := make([]*settleOp, 0, s.MaxBatch)
	busy := false
	for {
		select {
		case o := <-s.settles:
			batch = collect(s.settles, append(batch[:0], o), s.MaxBatch, busy, s.BatchDelay)
			busy = len(batch) > 1
			s.settleBatch(batch)
		case <-s.closing:
			for len(s.settles) > 0 {
				s.settleBatch(drain(s.settles, batch[:0], s.MaxBatch))
			}
			return
		}
	}
}

// settleBatch settles ops in one transaction. It sorts them by their
// receipts' keys, the order every transaction locks receipts in, and by
// their routes among one receipt's.
func (s *Store) settleBatch(ops []*settleOp) {
	slices.SortStableFunc(ops, func(a, b *settleOp) int {
		return cmp.Or(cmp.Compare(a.c.Source, b.c.Source), cmp.Compare(a.c.RequestID, b.c.RequestID),
			cmp.Compare(a.c.Route, b.c.Route))
	})
	var missed []bool
	var err error
	for attempt := 1; ; attempt++ {
		missed, err = s.trySettle(ops)
		if !retryable(err) || attempt == maxConflicts {
			break
		}
	}
	s.observe(err)
	if err != nil {
		s.settleLog.Fail("settle batch", zap.Int("ops", len(ops)), zap.Error(err))
		err = unavailable(err)
	} else {
		s.settleLog.OK("settle batches complete again")
		signal(s.notify)
	}
	for i, o := range ops {
		switch {
		case err != nil:
			o.done <- err
		case missed[i]:
			o.done <- s.repeated(&o.c)
		default:
			o.done <- nil
		}
	}
}

// trySettle writes ops, sorted as settleBatch sorts them: it locks their
// receipts, then settles each move's claims with one statement, all in one
// round trip. missed[i] says ops[i]'s claim no longer held its entry. A
// claim is known by its token, which no other claim shares: one settled
// twice in one batch misses the second time, so that repeated answers it
// as it would a later batch, while two claims of one entry, an expired one
// and the one that took the entry over, are both tried and only the
// holder settles.
func (s *Store) trySettle(ops []*settleOp) (missed []bool, err error) {
	ctx, cancel := s.background()
	defer cancel()
	missed = make([]bool, len(ops))
	var receipts receiptKeys
	var sets [len(settleStatements)]settleSet
	seen := make(map[uint64]bool, len(ops))
	for i, o := range ops {
		if seen[o.c.Token] {
			missed[i] = true
			continue
		}
		seen[o.c.Token] = true
		receipts.add(o.c.Source, o.c.RequestID)
		eff := forward.Apply(o.c.Entry, o.r)
		if err := sets[eff.Move].add(i, &o.c, &eff); err != nil {
			return nil, err
		}
	}
	b := &pgx.Batch{}
	b.Queue(lockSettling, receipts.source, receipts.id)
	var queued []*settleSet
	for m := range sets {
		if set := &sets[m]; len(set.ops) > 0 {
			b.Queue(settleStatements[m], set.args(forward.Move(m))...)
			queued = append(queued, set)
		}
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		res := tx.SendBatch(ctx, b)
		defer res.Close()
		if _, err := res.Exec(); err != nil {
			return err
		}
		for _, set := range queued {
			var done []int64
			if err := res.QueryRow().Scan(&done); err != nil {
				return err
			}
			held := make(map[int64]bool, len(done))
			for _, token := range done {
				held[token] = true
			}
			for j, i := range set.ops {
				missed[i] = !held[set.token[j]]
			}
		}
		return res.Close()
	})
	return missed, err
}

// settleStatements settle the claims of one move each.
var settleStatements = [...]string{forward.Remove: settleRemove, forward.Reschedule: settleReschedule, forward.Bury: settleBury}

// receiptKeys are the keys of the receipts a batch writes, each once, in
// the order added.
type receiptKeys struct{ source, id []string }

// add adds a key unless it is the last one added: keys come sorted.
func (k *receiptKeys) add(source, id string) {
	if n := len(k.id); n > 0 && k.source[n-1] == source && k.id[n-1] == id {
		return
	}
	k.source, k.id = append(k.source, source), append(k.id, id)
}

// settleSet holds the arrays of one move's settle statement, an element a
// claim; ops are the claims' places in the batch.
type settleSet struct {
	ops                                            []int
	seq, token                                     []int64
	source, id, route, status                      []string
	created                                        []time.Time
	attempts, lastStatus                           []int
	lastError                                      []string
	next, dead                                     []time.Time
	resource, version, contentType, headers, trace []string
	body                                           [][]byte
}

// add appends the claim c, which is ops[i], with its effect.
func (s *settleSet) add(i int, c *forward.Claim, eff *forward.Effect) error {
	status, err := settledStatus(eff.Status, int64(c.Token))
	if err != nil {
		return err
	}
	s.ops = append(s.ops, i)
	s.seq, s.token = append(s.seq, int64(c.Seq)), append(s.token, int64(c.Token))
	s.source, s.id, s.route = append(s.source, c.Source), append(s.id, c.RequestID), append(s.route, c.Route)
	s.created, s.status = append(s.created, c.CreatedAt), append(s.status, string(status))
	e := &eff.Entry
	switch eff.Move {
	case forward.Reschedule, forward.Bury:
		s.attempts, s.lastStatus = append(s.attempts, e.Attempts), append(s.lastStatus, e.LastStatus)
		s.lastError, s.next = append(s.lastError, e.LastError), append(s.next, e.NextAttemptAt)
	}
	if eff.Move != forward.Bury {
		return nil
	}
	headers, err := json.Marshal(e.Headers)
	if err != nil {
		return err
	}
	s.dead, s.resource, s.version = append(s.dead, *e.DeadAt), append(s.resource, e.Resource), append(s.version, e.Version)
	s.contentType, s.headers = append(s.contentType, e.ContentType), append(s.headers, string(headers))
	s.body, s.trace = append(s.body, e.Body), append(s.trace, e.Trace)
	return nil
}

// args are the arguments of m's settle statement.
func (s *settleSet) args(m forward.Move) []any {
	args := []any{s.seq, s.token, s.source, s.id, s.created, s.route, s.status}
	if m == forward.Remove {
		return args
	}
	args = append(args, s.attempts, s.lastStatus, s.lastError, s.next)
	if m == forward.Reschedule {
		return args
	}
	return append(args, s.dead, s.resource, s.version, s.contentType, s.headers, s.body, s.trace)
}

// repeated answers a Settle whose claim no longer held its entry: nil when
// that claim was settled already, forward.ErrLeaseLost when another claim
// took the entry.
func (s *Store) repeated(c *forward.Claim) error {
	ctx, cancel := s.background()
	defer cancel()
	var done bool
	if err := s.pool.QueryRow(ctx, settled, int64(c.Seq), int64(c.Token), c.Source, c.RequestID, c.Route).Scan(&done); err != nil {
		return unavailable(err)
	}
	if !done {
		return forward.ErrLeaseLost
	}
	return nil
}
