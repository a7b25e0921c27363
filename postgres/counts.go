package postgres

import (
	"context"

	"go.uber.org/zap"
)

// fold runs Fold, every FoldInterval.
func (s *Store) fold() {
	ctx, cancel := s.background()
	defer cancel()
	if err := s.Fold(ctx); err != nil {
		s.foldLog.Fail("fold the outbox and dead-letter counts", zap.Error(err))
		return
	}
	s.foldLog.OK("counts folded again")
}

// Fold replaces the count rows the triggers added since the last fold
// with one row a target and kind (foldCounts), so that Pending and
// DeadLetterCounts add up a few rows a target, and then vacuums them
// when autovacuum leaves them alone. Every replica folds; two at once
// keep the counts exact.
func (s *Store) Fold(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, foldCounts); err != nil {
		return err
	}
	return s.afterFold(ctx)
}

// noVacuum is afterFold when autovacuum takes care of the count rows, or
// webhookd may not vacuum them.
func noVacuum(context.Context) error { return nil }
