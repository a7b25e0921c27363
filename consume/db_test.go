package consume_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/webhookd/webhookd/consume"
)

// testDB is one database with tables of its own: a processed-keys table
// named for the test, and an effects table that the test's apply writes.
type testDB struct {
	dialect consume.Dialect
	db      *sql.DB
	table   string
}

// eachDB runs fn on SQLite in a temporary directory, and on PostgreSQL
// and MySQL/MariaDB when WEBHOOKD_TEST_POSTGRES and WEBHOOKD_TEST_MYSQL
// name them (.ci/run sets both).
func eachDB(t *testing.T, fn func(t *testing.T, tdb *testDB)) {
	t.Helper()
	for _, d := range []consume.Dialect{consume.PostgreSQL, consume.MySQL, consume.SQLite} {
		t.Run(d.String(), func(t *testing.T) {
			fn(t, openDB(t, d))
		})
	}
}

func openDB(t testing.TB, d consume.Dialect) *testDB {
	t.Helper()
	var driver, dsn string
	switch d {
	case consume.PostgreSQL:
		driver, dsn = "pgx", os.Getenv("WEBHOOKD_TEST_POSTGRES")
		if dsn == "" {
			t.Skip("WEBHOOKD_TEST_POSTGRES is not set")
		}
	case consume.MySQL:
		driver, dsn = "mysql", os.Getenv("WEBHOOKD_TEST_MYSQL")
		if dsn == "" {
			t.Skip("WEBHOOKD_TEST_MYSQL is not set")
		}
	case consume.SQLite:
		driver = "sqlite"
		dsn = "file:" + filepath.Join(t.TempDir(), "test.db") + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	// Below the servers' connection limits, which other tests share.
	db.SetMaxOpenConns(16)
	t.Cleanup(func() { db.Close() })
	b := make([]byte, 6)
	rand.Read(b)
	tdb := &testDB{dialect: d, db: db, table: "consume_" + hex.EncodeToString(b)}
	tdb.exec(t, "CREATE TABLE "+tdb.effects()+" (k VARCHAR(255) NOT NULL, qty INTEGER NOT NULL)")
	t.Cleanup(func() {
		for _, table := range []string{tdb.effects(), tdb.table, tdb.table + "_versions"} {
			db.Exec("DROP TABLE IF EXISTS " + table)
		}
	})
	return tdb
}

func (tdb *testDB) effects() string { return tdb.table + "_effects" }

func (tdb *testDB) exec(t testing.TB, stmt string, args ...any) {
	t.Helper()
	if _, err := tdb.db.Exec(stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// consumer returns a Consumer on tdb's tables, schema created.
func (tdb *testDB) consumer(t testing.TB, cfg consume.Config) *consume.Consumer {
	t.Helper()
	cfg.DB, cfg.Dialect, cfg.Table = tdb.db, tdb.dialect, tdb.table
	c, err := consume.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CreateSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// record is an apply that writes one effect row, in the transaction.
func (tdb *testDB) record(ctx context.Context, tx *sql.Tx, d consume.Delivery) error {
	_, err := tx.ExecContext(ctx, tdb.dialect.Rebind("INSERT INTO "+tdb.effects()+" (k, qty) VALUES (?, ?)"), d.Key, 1)
	return err
}

// applied counts the effect rows of key.
func (tdb *testDB) applied(t testing.TB, key string) int {
	t.Helper()
	var n int
	if err := tdb.db.QueryRow(tdb.dialect.Rebind("SELECT COUNT(*) FROM "+tdb.effects()+" WHERE k = ?"), key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
