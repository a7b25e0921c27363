// Package pgtest gives tests a PostgreSQL schema of their own in the
// database WEBHOOKD_TEST_POSTGRES names, and skips them, saying why, when
// it names none.
package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Env names the variable that holds the DSN of a PostgreSQL database the
// tests may create schemas in.
const Env = "WEBHOOKD_TEST_POSTGRES"

// DSN returns the test database's DSN, or skips t.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(Env)
	if dsn == "" {
		const why = "PostgreSQL tests skipped: set " + Env + " to a database DSN, e.g. postgres://postgres@127.0.0.1:5432/test"
		if os.Getenv("CI") != "" {
			t.Fatal(why + " (CI sets it: this run must not skip them)")
		}
		t.Skip(why)
	}
	return dsn
}

// HostPort is the host:port of the test database.
func HostPort(t testing.TB) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(DSN(t))
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// schemas remembers which test schemas exist, so that a second DSN for
// one key finds the first one's tables.
var schemas sync.Map

// SchemaDSN returns a DSN whose tables live in a schema of their own,
// named after key and this process: created empty on first use, dropped
// when the test that first asked for it ends. The process is in the name
// so that two test runs on one database, of two checkouts or two packages,
// never share or drop each other's schema.
func SchemaDSN(t testing.TB, key string) string {
	t.Helper()
	dsn := DSN(t)
	sum := sha256.Sum256([]byte(strconv.Itoa(os.Getpid()) + "/" + key))
	schema := "webhookd_test_" + hex.EncodeToString(sum[:8])
	if _, loaded := schemas.LoadOrStore(schema, true); !loaded {
		name := pgx.Identifier{schema}.Sanitize()
		exec(t, dsn, "DROP SCHEMA IF EXISTS "+name+" CASCADE; CREATE SCHEMA "+name)
		t.Cleanup(func() {
			exec(t, dsn, "DROP SCHEMA "+name+" CASCADE")
			schemas.Delete(schema)
		})
	}
	return withSearchPath(t, dsn, schema)
}

func exec(t testing.TB, dsn, sql string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", Env, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

func withSearchPath(t testing.TB, dsn, schema string) string {
	if !strings.Contains(dsn, "://") {
		return dsn + " search_path=" + schema
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
