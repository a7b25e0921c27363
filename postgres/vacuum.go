package postgres

import (
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// tables are webhookd's tables that change after they are written.
var tables = []string{"webhookd_receipts", "webhookd_latest", "webhookd_payloads", "webhookd_outbox", "webhookd_dead_letters",
	"webhookd_routes", "webhookd_counts"}

// selfVacuumed are the tables webhookd vacuums itself when autovacuum
// leaves them alone. Both are rewritten all the time and small in steady
// state, so a VACUUM of either is cheap, and both set webhookd's speed
// without one: the count rows are summed at every poll, and a claim walks
// the due index past the entries of every row deleted since the outbox's
// last VACUUM. The other tables' dead rows cost space, not speed.
var selfVacuumed = []string{"webhookd_counts", "webhookd_outbox"}

// Thresholds of the outbox's VACUUM: it runs once the outbox has
// vacuumDead dead rows and vacuumScale of its live ones, so that a claim's
// walk past dead index entries stays short in steady state, and a backlog
// is not read whole at every VacuumInterval.
const (
	vacuumDead  = 1000
	vacuumScale = 0.1
)

// autovacuumOff names those of the tables ($1) autovacuum leaves alone:
// it is off for the server, or for the table (autovacuum_enabled in its
// storage parameters, any spelling of false PostgreSQL accepts).
const autovacuumOff = `SELECT c.relname FROM unnest($1::text[]) AS t(name)
	JOIN pg_class c ON c.oid = to_regclass(t.name)
	WHERE current_setting('autovacuum') <> 'on'
		OR EXISTS (SELECT 1 FROM unnest(c.reloptions) AS o(opt)
			WHERE lower(o.opt) ~ '^autovacuum_enabled=(f|fa|fal|fals|false|n|no|of|off|0)$')
	ORDER BY c.relname`

// names runs sql with tables and returns the names it selects; a database
// that cannot say (not PostgreSQL's catalog) names none.
func (s *Store) names(ctx context.Context, sql string, tables []string) []string {
	rows, err := s.pool.Query(ctx, sql, tables)
	if err != nil {
		s.Logger.Debug("cannot read the catalog", zap.Error(err))
		return nil
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		s.Logger.Debug("cannot read the catalog", zap.Error(err))
		return nil
	}
	return names
}

// vacuums returns which of selfVacuumed webhookd vacuums: those autovacuum
// leaves alone and this user may vacuum. It logs one warning naming the
// tables autovacuum leaves alone that webhookd does not vacuum: their
// space of deleted and updated rows is never reused until a VACUUM.
func (s *Store) vacuums(ctx context.Context) []string {
	off := s.names(ctx, autovacuumOff, tables)
	var own []string
	for _, t := range s.names(ctx, mayVacuum, selfVacuumed) {
		if slices.Contains(off, t) {
			own = append(own, t)
		}
	}
	left := slices.DeleteFunc(slices.Clone(off), func(t string) bool { return slices.Contains(own, t) })
	if len(left) > 0 {
		s.Logger.Warn("autovacuum is off for webhookd's tables: the space of their deleted and updated rows "+
			"(every receipt a redelivery or a forward result updates, every receipt and payload expired, "+
			"every dead letter retried or discarded, every change of a route's state) is never reused, so the tables and their indexes only grow. "+
			"webhookd vacuums the outbox and its counts itself when it may (as their owner or the database's); "+
			"schedule VACUUM (ANALYZE) of these tables, or turn autovacuum on for them",
			zap.String("tables", strings.Join(left, ", ")))
	}
	if len(own) > 0 {
		s.Logger.Info("autovacuum is off for tables webhookd vacuums itself", zap.String("tables", strings.Join(own, ", ")))
	}
	return own
}

// vacuumCountsAfterFold is foldCounts' follow-up when webhookd vacuums
// the count rows: every fold deletes as many rows as it leaves.
func (s *Store) vacuumCountsAfterFold(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, vacuumCounts)
	return err
}

// vacuumOutbox vacuums the outbox, every VacuumInterval, once it holds
// enough dead rows, one replica at a time: a replica whose VACUUM finds
// another's running skips the outbox until the next interval.
func (s *Store) vacuumOutbox() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := s.tryVacuumOutbox(ctx); err != nil {
		s.vacuumLog.Fail("vacuum the outbox", zap.Error(err))
		return
	}
	s.vacuumLog.OK("outbox vacuumed again")
}

func (s *Store) tryVacuumOutbox(ctx context.Context) error {
	var due bool
	if err := s.pool.QueryRow(ctx, outboxDead, vacuumDead, vacuumScale).Scan(&due); err != nil || !due {
		return err
	}
	_, err := s.vacuumOutboxAlone(ctx)
	return err
}

// vacuumOutboxAlone vacuums the outbox unless another VACUUM of it runs
// now, and says whether it did.
func (s *Store) vacuumOutboxAlone(ctx context.Context) (bool, error) {
	var skipped bool
	conn, err := s.vacuumConn(ctx, &skipped)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, vacuumOutbox); err != nil {
		return false, err
	}
	return !skipped, nil
}

// vacuumConn opens a connection for one VACUUM, outside the pool and with
// no statement timeout: a VACUUM cancelled midway starts over at the
// next, so one too large for the timeout would never finish. Lifting the
// timeout with SET on a pooled connection would outlive the VACUUM, and
// behind a pooler in transaction mode would stay with a server connection
// other clients are given. skipped is set when SKIP_LOCKED skips a table,
// which it says with a warning (lock_not_available) as the statement
// succeeds.
func (s *Store) vacuumConn(ctx context.Context, skipped *bool) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig
	cfg.RuntimeParams["statement_timeout"] = "0"
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		*skipped = *skipped || n.Code == "55P03"
	}
	return pgx.ConnectConfig(ctx, cfg)
}
