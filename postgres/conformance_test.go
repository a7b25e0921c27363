package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd/store/storetest"
)

// TestEnv names the variable that holds the DSN of a PostgreSQL database
// the tests may create schemas in.
const TestEnv = "WEBHOOKD_TEST_POSTGRES"

// testDSN returns the test database's DSN, or skips the test.
func testDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv(TestEnv)
	if dsn == "" {
		t.Skip("PostgreSQL tests skipped: set " + TestEnv + " to a database DSN, e.g. postgres://postgres@127.0.0.1:5432/test")
	}
	return dsn
}

// schemas remembers which test schemas exist, so that a reopen finds its
// data and the first open drops the schema when the test ends.
var schemas sync.Map

// schemaDSN returns a DSN whose tables live in a schema of their own,
// named after key, created on first use and dropped when t ends.
func schemaDSN(t *testing.T, key string) string {
	t.Helper()
	dsn := testDSN(t)
	sum := sha256.Sum256([]byte(key))
	schema := "webhookd_test_" + hex.EncodeToString(sum[:8])
	if _, loaded := schemas.LoadOrStore(schema, true); !loaded {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect to %s: %v", TestEnv, err)
		}
		defer conn.Close(ctx)
		name := pgx.Identifier{schema}.Sanitize()
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE; CREATE SCHEMA "+name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
				t.Error(err)
			}
			schemas.Delete(schema)
		})
	}
	return withSearchPath(t, dsn, schema)
}

func withSearchPath(t *testing.T, dsn, schema string) string {
	if !strings.Contains(dsn, "://") {
		return dsn + " search_path=" + schema
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s: %v", TestEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func openTest(t *testing.T, c storetest.Config) *Store {
	t.Helper()
	s := New(schemaDSN(t, c.Dir))
	s.Logger = zaptest.NewLogger(t)
	if c.Now != nil {
		s.Now = c.Now
	}
	if c.ReceiptTTL > 0 {
		s.ReceiptTTL = c.ReceiptTTL
	}
	if c.FailCommit != nil {
		s.commit = func(ctx context.Context, tx pgx.Tx) error {
			if c.FailCommit() {
				return errors.New("injected commit failure")
			}
			return tx.Commit(ctx)
		}
	}
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	testDSN(t)
	storetest.Run(t, func(t *testing.T, c storetest.Config) storetest.Backend { return openTest(t, c) })
}
