package postgres

import (
	"context"
	"fmt"
)

// allTables are webhookd's tables: those that change, and the schema's
// version.
var allTables = append([]string{"webhookd_schema"}, tables...)

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
	if err := s.pool.QueryRow(ctx, tablesSize, allTables).Scan(&n); err != nil {
		return 0, fmt.Errorf("size of the tables: %w", unavailable(err))
	}
	return n, nil
}
