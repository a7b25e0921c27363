package postgres

import (
	"context"

	"go.uber.org/zap"
)

// expire runs Expire, every ExpiryInterval.
func (s *Store) expire() {
	ctx, cancel := s.background()
	defer cancel()
	if err := s.Expire(ctx); err != nil {
		s.Logger.Warn("delete expired receipts and payloads", zap.Error(err))
	}
}

// Expire deletes the receipts and payloads whose receipt_ttl has passed,
// ExpiryBatch rows a statement, so that no statement holds many locks or
// runs long. Reads treat such rows as absent already; this gives their
// space back. Every replica runs it: two at once skip each other's rows.
func (s *Store) Expire(ctx context.Context) error {
	now := s.Now()
	for _, sql := range []string{expireReceipts, expirePayloads} {
		for {
			select {
			case <-s.closing:
				return nil
			default:
			}
			tag, err := s.pool.Exec(ctx, sql, now, s.ExpiryBatch)
			if err != nil {
				return err
			}
			if tag.RowsAffected() < int64(s.ExpiryBatch) {
				break
			}
		}
	}
	return nil
}
