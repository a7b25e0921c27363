package main

import (
	"context"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/gateway"
	"github.com/webhookd/webhookd/postgres"
	"github.com/webhookd/webhookd/store"
)

// Backend is where webhookd keeps receipts, versions and the outbox:
// Badger in one process (store), or PostgreSQL shared by any number of
// replicas (postgres).
type Backend interface {
	gateway.Decider
	gateway.Records
	forward.Queue
	DeadLetterCounts() (map[string]int, error)
	// Failed is closed when the backend takes nothing more until webhookd
	// starts again.
	Failed() <-chan struct{}
	Close() error
}

// openBackend opens the backend cfg chooses.
func (m *Main) openBackend(ctx context.Context) (Backend, error) {
	cfg := m.Config
	if cfg.Storage.Backend == configs.Postgres {
		s := postgres.New(cfg.Storage.DSN)
		s.PoolSize, s.StatementTimeout = cfg.Storage.PoolSize, cfg.Storage.StatementTimeout
		s.ReceiptTTL = cfg.ReceiptTTL
		s.Logger = m.Logger.Named("store")
		if err := s.Open(ctx); err != nil {
			return nil, err
		}
		return s, nil
	}
	s := store.New(cfg.DataDir)
	s.ReceiptTTL = cfg.ReceiptTTL
	s.Logger = m.Logger.Named("store")
	s.MemoryLimit = softMemoryLimit()
	s.MinFree = cfg.Storage.MinFree
	if err := s.Open(); err != nil {
		return nil, err
	}
	return s, nil
}

// maxBody is the largest body the chosen backend stores.
func maxBody(cfg *configs.Config) int {
	if cfg.Storage.Backend == configs.Postgres {
		return postgres.MaxBody
	}
	return store.MaxBody
}
