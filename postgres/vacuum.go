package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// tables are webhookd's tables that change after they are written.
var tables = []string{"webhookd_receipts", "webhookd_latest", "webhookd_payloads", "webhookd_outbox", "webhookd_dead_letters",
	"webhookd_routes"}

// autovacuumOff names those of the tables ($1) autovacuum leaves alone:
// it is off for the server, or for the table (autovacuum_enabled in its
// storage parameters, any spelling of false PostgreSQL accepts).
const autovacuumOff = `SELECT c.relname FROM unnest($1::text[]) AS t(name)
	JOIN pg_class c ON c.oid = to_regclass(t.name)
	WHERE current_setting('autovacuum') <> 'on'
		OR EXISTS (SELECT 1 FROM unnest(c.reloptions) AS o(opt)
			WHERE lower(o.opt) ~ '^autovacuum_enabled=(f|fa|fal|fals|false|n|no|of|off|0)$')
	ORDER BY c.relname`

// warnAutovacuum logs one warning at Open when autovacuum leaves any of
// webhookd's tables alone. webhookd's statements do not depend on table
// statistics (each is planned when it runs, and its lookups can only use
// an index), so intake keeps its speed as the tables grow; but only a
// VACUUM makes the space of deleted and updated rows reusable, and
// webhookd does not vacuum: that is the database owner's schedule. A
// database that cannot say (not PostgreSQL's catalog) gets no warning.
func (s *Store) warnAutovacuum(ctx context.Context) {
	rows, err := s.pool.Query(ctx, autovacuumOff, tables)
	if err != nil {
		s.Logger.Debug("cannot tell whether autovacuum is on", zap.Error(err))
		return
	}
	off, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		s.Logger.Debug("cannot tell whether autovacuum is on", zap.Error(err))
		return
	}
	if len(off) == 0 {
		return
	}
	s.Logger.Warn("autovacuum is off for webhookd's tables: the space of their deleted and updated rows "+
		"(every forwarded outbox entry, every receipt a redelivery or a forward result updates, "+
		"every receipt and payload expired, every change of a route's state) is never reused, so the tables and their indexes only grow. "+
		"webhookd's statements do not depend on table statistics, so its speed holds, but it does not vacuum: "+
		"schedule VACUUM (ANALYZE) of these tables, or turn autovacuum on for them",
		zap.String("tables", strings.Join(off, ", ")))
}
