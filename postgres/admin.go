package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/versioning"
)

// Receipt returns the receipt of one request ID, with its current forward
// status.
func (s *Store) Receipt(ctx context.Context, source, requestID string) (*dedupe.Receipt, error) {
	if err := s.available(); err != nil {
		return nil, err
	}
	r, err := scanReceipt(s.pool.QueryRow(ctx, readReceipt, source, requestID, s.Now()))
	if err != nil {
		return nil, fmt.Errorf("receipt %s/%s: %w", source, requestID, notFound(err))
	}
	return r, nil
}

// Latest returns the latest accepted version of one resource.
func (s *Store) Latest(ctx context.Context, source, resource string) (*versioning.Latest, error) {
	if err := s.available(); err != nil {
		return nil, err
	}
	var src, res string
	l, err := scanLatest(s.pool.QueryRow(ctx, readOneLatest, source, resource), &src, &res)
	if err != nil {
		return nil, fmt.Errorf("latest %s/%s: %w", source, resource, notFound(err))
	}
	return l, nil
}

// notFound turns the absence of a row into ENOTFOUND.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return webhookd.Errorf(webhookd.ENOTFOUND, "not found")
	}
	return unavailable(err)
}

// Outbox returns the pending entries of source ("" for all), without
// bodies, in outbox order.
func (s *Store) Outbox(ctx context.Context, source string) ([]forward.Entry, error) {
	return s.entries(ctx, listOutbox, source, false)
}

// DeadLetters returns the dead letters of source ("" for all), without
// bodies.
func (s *Store) DeadLetters(ctx context.Context, source string) ([]forward.Entry, error) {
	return s.entries(ctx, listDeadLetters, source, true)
}

func (s *Store) entries(ctx context.Context, sql, source string, dead bool) ([]forward.Entry, error) {
	if err := s.available(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, sql, source)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	entries := []forward.Entry{}
	for rows.Next() {
		var e forward.Entry
		if dead {
			var deadAt time.Time
			var lost bool
			if e, err = scanEntry(rows, &deadAt, &lost); err != nil {
				return nil, unavailable(err)
			}
			deadAt = deadAt.UTC()
			e.DeadAt, e.BodyLost = &deadAt, lost
		} else if e, err = scanEntry(rows); err != nil {
			return nil, unavailable(err)
		}
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	return entries, nil
}

// RetryDeadLetter puts a dead letter back into the outbox with its
// attempts reset.
func (s *Store) RetryDeadLetter(ctx context.Context, source, requestID string) error {
	err := s.repair(ctx, func(tx pgx.Tx, now time.Time) error {
		held, e, err := lockDeadLetterOf(ctx, tx, source, requestID, now)
		if err != nil {
			return err
		}
		if err := forward.CanRetry(&e, held); err != nil {
			return err
		}
		if err := canResend(ctx, tx, &e); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, deleteDeadLetter, source, requestID); err != nil {
			return err
		}
		return s.requeue(ctx, tx, e, now)
	})
	if err != nil {
		return fmt.Errorf("retry dead letter: %w", err)
	}
	return nil
}

// lockDeadLetterOf locks the receipt requestID holds now (nil when none)
// and its dead letter, with the dead letter's body, in that order, as
// decisions lock receipts first.
func lockDeadLetterOf(ctx context.Context, tx pgx.Tx, source, requestID string, now time.Time) (*dedupe.Receipt, forward.Entry, error) {
	held, err := lockHeld(ctx, tx, source, requestID, now)
	if err != nil {
		return nil, forward.Entry{}, err
	}
	var deadAt time.Time
	var body []byte
	e, err := scanEntry(tx.QueryRow(ctx, lockDeadLetter, source, requestID), &deadAt, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, forward.Entry{}, webhookd.Errorf(webhookd.ENOTFOUND, "no dead letter for %s/%s", source, requestID)
	}
	if err != nil {
		return nil, forward.Entry{}, err
	}
	e.DeadAt, e.BodyLost, e.Body = &deadAt, body == nil, body
	return held, e, nil
}

// DiscardDeadLetter drops a dead letter; its receipt says it was
// discarded.
func (s *Store) DiscardDeadLetter(ctx context.Context, source, requestID string) error {
	err := s.repair(ctx, func(tx pgx.Tx, now time.Time) error {
		held, e, err := lockDeadLetterOf(ctx, tx, source, requestID, now)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, deleteDeadLetter, source, requestID); err != nil {
			return err
		}
		if status, ok := forward.Discarded(&e, held); ok {
			return writeForward(ctx, tx, source, requestID, held.FirstSeen, status)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("discard dead letter: %w", err)
	}
	return nil
}

// Redeliver forwards an accepted request again, with the same
// Idempotency-Key, for a downstream that lost it.
func (s *Store) Redeliver(ctx context.Context, source, requestID string) error {
	err := s.repair(ctx, func(tx pgx.Tx, now time.Time) error {
		r, err := lockHeld(ctx, tx, source, requestID, now)
		if err != nil {
			return err
		}
		if r == nil {
			return webhookd.Errorf(webhookd.ENOTFOUND, "no receipt for %s/%s", source, requestID)
		}
		if err := forward.CanRedeliver(r); err != nil {
			return err
		}
		// The latest version before the payload: decisions lock them in
		// that order.
		if err := canResend(ctx, tx, &forward.Entry{Source: source, RequestID: requestID, Resource: r.Resource, Version: r.Version}); err != nil {
			return err
		}
		var body []byte
		e, err := scanEntry(tx.QueryRow(ctx, lockPayload, source, requestID, r.FirstSeen, now), &body)
		if errors.Is(err, pgx.ErrNoRows) {
			return forward.ErrNoPayload
		}
		if err != nil {
			return err
		}
		e.Body = body
		return s.requeue(ctx, tx, e, now)
	})
	if err != nil {
		return fmt.Errorf("redeliver: %w", err)
	}
	return nil
}

// repair runs fn in a transaction of its own. Repairs lock what they read
// in the order decisions do: the receipt, the latest version, the payload.
func (s *Store) repair(ctx context.Context, fn func(tx pgx.Tx, now time.Time) error) error {
	if err := s.available(); err != nil {
		return err
	}
	now := s.Now().Truncate(time.Microsecond)
	err := s.inTx(ctx, func(tx pgx.Tx) error { return fn(tx, now) })
	if err != nil {
		return unavailable(err)
	}
	signal(s.notify)
	return nil
}

// lockHeld returns the live receipt of requestID, locked, or nil.
func lockHeld(ctx context.Context, tx pgx.Tx, source, requestID string, now time.Time) (*dedupe.Receipt, error) {
	r, err := scanReceipt(tx.QueryRow(ctx, lockReceipt, source, requestID, now))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// canResend applies forward.CanResend with the resource's latest version
// locked: a decision accepting a newer version waits until the requeue
// committed, so the newer entry comes after it in the lane.
func canResend(ctx context.Context, tx pgx.Tx, e *forward.Entry) error {
	if e.Resource == "" || e.Version == "" {
		return nil
	}
	var src, res string
	l, err := scanLatest(tx.QueryRow(ctx, lockLatest, e.Source, e.Resource), &src, &res)
	if errors.Is(err, pgx.ErrNoRows) {
		l, err = nil, nil
	}
	if err != nil {
		return err
	}
	return forward.CanResend(e, l)
}

// requeue puts e, with its body, at the end of the outbox as a fresh
// forward intent; its payload then lives for the receipt TTL from now.
func (s *Store) requeue(ctx context.Context, tx pgx.Tx, e forward.Entry, now time.Time) error {
	e, status := forward.Requeue(e, now)
	w := &writes{now: now}
	w.enqueue(&e, now.Add(s.ReceiptTTL))
	if err := w.send(ctx, tx); err != nil {
		return err
	}
	return writeForward(ctx, tx, e.Source, e.RequestID, e.CreatedAt, status)
}

func writeForward(ctx context.Context, tx pgx.Tx, source, requestID string, firstSeen time.Time, st webhookd.ForwardStatus) error {
	_, err := tx.Exec(ctx, setForward, source, requestID, firstSeen, string(st.State), st.Attempts, st.LastStatus,
		st.LastError, st.NextAttemptAt, st.DeliveredAt)
	return err
}
