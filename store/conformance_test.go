package store

import (
	"errors"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c storetest.Config) storage.Backend {
		s := New(c.Dir)
		s.Logger = zaptest.NewLogger(t)
		s.Now, s.ReceiptTTL = c.Now, c.ReceiptTTL
		if c.FailCommit != nil {
			s.commitTxn = func(txn *badger.Txn) error {
				if c.FailCommit() {
					return errors.New("injected commit failure")
				}
				return txn.Commit()
			}
		}
		if err := s.Open(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
