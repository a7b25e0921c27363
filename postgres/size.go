package postgres

import (
	"context"
	"fmt"
)

// tables are webhookd's tables.
var tables = []string{"webhookd_receipts", "webhookd_latest", "webhookd_payloads", "webhookd_outbox", "webhookd_dead_letters", "webhookd_schema"}

// tablesSize sums the disk webhookd's tables take with their indexes and
// TOAST data (pg_total_relation_size), each found by the search path, as
// webhookd's statements find them.
const tablesSize = `SELECT coalesce(sum(pg_total_relation_size(to_regclass(t))), 0)::bigint FROM unnest($1::text[]) AS t`

// Size returns the bytes webhookd's tables take in the database, indexes
// included: what its data costs the database's disk, which the database's
// operator watches as a whole.
func (s *Store) Size(ctx context.Context) (int64, error) {
	if err := s.Ready(); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, tablesSize, tables).Scan(&n); err != nil {
		return 0, fmt.Errorf("size of the tables: %w", unavailable(err))
	}
	return n, nil
}
