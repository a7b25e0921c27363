package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd/postgres/pgtest"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/store/storetest"
)

func openTest(t *testing.T, c storetest.Config) *Store {
	t.Helper()
	s := New(pgtest.SchemaDSN(t, c.Dir))
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
	pgtest.DSN(t)
	storetest.Run(t, func(t *testing.T, c storetest.Config) storage.Backend { return openTest(t, c) })
}
