package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/postgres"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/store"
)

// openBackend opens the backend cfg chooses: Badger in one process
// (store), or PostgreSQL shared by any number of replicas (postgres).
func (m *Main) openBackend(ctx context.Context) (storage.Backend, error) {
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
	if err := checkUnheld(cfg.DataDir); err != nil {
		return nil, err
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

// checkUnheld fails when another process holds Badger's lock on dataDir,
// saying which: Badger locks the directory and writes its holder's PID to
// dataDir/LOCK. It runs before the store opens, which would otherwise
// touch the directory first and then fail with Badger's own words.
func checkUnheld(dataDir string) error {
	if !dirLocked(dataDir) {
		return nil
	}
	holder := "another process"
	lock := filepath.Join(dataDir, "LOCK")
	if raw, err := os.ReadFile(lock); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil {
			holder = fmt.Sprintf("another process, PID %d (from %s)", pid, lock)
		}
	}
	return fmt.Errorf("data_dir: %s is in use by %s, most likely another webhookd; one data_dir serves one webhookd at a time: stop the other, or give this one another data_dir (replicas share storage.backend postgres instead)", dataDir, holder)
}

// maxBody is the largest body the chosen backend stores.
func maxBody(cfg *configs.Config) int {
	if cfg.Storage.Backend == configs.Postgres {
		return postgres.MaxBody
	}
	return store.MaxBody
}
