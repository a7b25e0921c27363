package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrations are applied in the order of their file names, NNNN_name.sql;
// NNNN is the schema version the file brings the database to.
//
//go:embed migrations/*.sql
var migrations embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations returns the embedded migrations in version order.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for i, name := range names { // Glob sorts
		base := path.Base(name)
		n, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(n)
		if err != nil || v != i+1 {
			return nil, fmt.Errorf("migration %s: want version %d first in its name", base, i+1)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(b)})
	}
	return ms, nil
}

// The schema version lives in one row, which the migrating transaction
// locks: replicas starting together take turns, and the second finds the
// work done. A row lock rather than an advisory lock works through a
// pooler in transaction mode.
const (
	createSchemaTable = `CREATE TABLE IF NOT EXISTS webhookd_schema (id integer PRIMARY KEY, version integer NOT NULL)`
	insertSchemaRow   = `INSERT INTO webhookd_schema (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING`
	lockSchemaRow     = `SELECT version FROM webhookd_schema WHERE id = 1 FOR UPDATE`
	setSchemaVersion  = `UPDATE webhookd_schema SET version = $1 WHERE id = 1`
)

// ErrSchemaNewer is migrate's answer for a database that a newer webhookd
// migrated: this binary does not know its tables.
var ErrSchemaNewer = errors.New("the database schema is newer than this webhookd")

// migrate brings the database to the newest embedded schema version.
func migrate(ctx context.Context, pool *pgxpool.Pool, ms []migration) error {
	if err := bootstrap(ctx, pool); err != nil {
		return fmt.Errorf("create webhookd_schema: %w", err)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var current int
		if err := tx.QueryRow(ctx, lockSchemaRow).Scan(&current); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		known := len(ms)
		if current > known {
			return fmt.Errorf("%w: the database is at schema version %d, this build knows versions up to %d; run a webhookd at least as new as the one that migrated it", ErrSchemaNewer, current, known)
		}
		for _, m := range ms[current:] {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, setSchemaVersion, m.version); err != nil {
				return fmt.Errorf("record schema version %d: %w", m.version, err)
			}
		}
		return nil
	})
}

// bootstrap creates the version table and its row. Two sessions running
// CREATE TABLE IF NOT EXISTS at once can both miss the table, and one then
// fails on the catalog (the table's row type, or its name, exists); the
// table exists then, so once more is enough.
func bootstrap(ctx context.Context, pool *pgxpool.Pool) error {
	create := func() error {
		_, err := pool.Exec(ctx, createSchemaTable)
		return err
	}
	err := create()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07" || pgErr.Code == "42710") {
		err = create()
	}
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, insertSchemaRow)
	return err
}
