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

// Receipt returns the receipt of one request ID, with the current forward
// status of each of its routes, in the source's route order.
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

// RetryDeadLetter puts a dead letter of target back into the outbox with
// its attempts reset.
func (s *Store) RetryDeadLetter(ctx context.Context, target forward.Target, requestID string) error {
	err := s.repair(ctx, func(tx pgx.Tx, now time.Time) error {
		held, e, err := lockDeadLetterOf(ctx, tx, target, requestID, now)
		if err != nil {
			return err
		}
		if err := forward.CanRetry(&e, held); err != nil {
			return err
		}
		if err := canResend(ctx, tx, &e); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, deleteDeadLetter, target.Source, target.Route, requestID); err != nil {
			return err
		}
		return s.requeue(ctx, tx, held, []forward.Entry{e}, now)
	})
	if err != nil {
		return fmt.Errorf("retry dead letter: %w", err)
	}
	return nil
}

// lockDeadLetterOf locks the receipt requestID holds now (nil when none)
// and its dead letter of target, with the dead letter's body, in that
// order, as decisions lock receipts first.
func lockDeadLetterOf(ctx context.Context, tx pgx.Tx, target forward.Target, requestID string, now time.Time) (*dedupe.Receipt, forward.Entry, error) {
	held, err := lockHeld(ctx, tx, target.Source, requestID, now)
	if err != nil {
		return nil, forward.Entry{}, err
	}
	var deadAt time.Time
	var body []byte
	e, err := scanEntry(tx.QueryRow(ctx, lockDeadLetter, target.Source, target.Route, requestID), &deadAt, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, forward.Entry{}, webhookd.Errorf(webhookd.ENOTFOUND, "no dead letter for %s/%s", target, requestID)
	}
	if err != nil {
		return nil, forward.Entry{}, err
	}
	e.DeadAt, e.BodyLost, e.Body = &deadAt, body == nil, body
	return held, e, nil
}

// DiscardDeadLetter drops a dead letter of target; its receipt says it
// was discarded on that route.
func (s *Store) DiscardDeadLetter(ctx context.Context, target forward.Target, requestID string) error {
	err := s.repair(ctx, func(tx pgx.Tx, now time.Time) error {
		held, e, err := lockDeadLetterOf(ctx, tx, target, requestID, now)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, deleteDeadLetter, target.Source, target.Route, requestID); err != nil {
			return err
		}
		status, ok := forward.Discarded(&e, held)
		if !ok {
			return nil
		}
		held.Route(e.Route).ForwardStatus = status
		return writeRoutes(ctx, tx, held, []string{e.Route})
	})
	if err != nil {
		return fmt.Errorf("discard dead letter: %w", err)
	}
	return nil
}

// Redeliver forwards an accepted request again to route, or to every
// route forward.Redeliverable allows when route is "", with the same
// Idempotency-Key, for a downstream that lost it. The routes' entries
// share the one payload, in one transaction.
func (s *Store) Redeliver(ctx context.Context, source, requestID, route string) error {
	err := s.repair(ctx, func(tx pgx.Tx, now time.Time) error {
		r, err := lockHeld(ctx, tx, source, requestID, now)
		if err != nil {
			return err
		}
		if r == nil {
			return webhookd.Errorf(webhookd.ENOTFOUND, "no receipt for %s/%s", source, requestID)
		}
		routes, err := forward.RedeliverTo(r, route)
		if err != nil {
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
		es := make([]forward.Entry, len(routes))
		for i, name := range routes {
			es[i] = e
			es[i].Route = name
		}
		return s.requeue(ctx, tx, r, es, now)
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

// requeue puts es, the entries of one request on some of its routes,
// sharing its body, at the end of the outbox as fresh forward intents;
// their payload then lives for the receipt TTL from now. held, the
// receipt the request ID has now (nil when none), says each route is
// pending again when the entries are its.
func (s *Store) requeue(ctx context.Context, tx pgx.Tx, held *dedupe.Receipt, es []forward.Entry, now time.Time) error {
	var routes []string
	for i := range es {
		var status webhookd.ForwardStatus
		es[i], status = forward.Requeue(es[i], now)
		if held == nil || !held.FirstSeen.Equal(es[i].CreatedAt) {
			continue
		}
		if rs := held.Route(es[i].Route); rs != nil {
			rs.ForwardStatus = status
			routes = append(routes, rs.Route)
		}
	}
	w := &writes{now: now}
	w.enqueue(es, now.Add(s.ReceiptTTL))
	if err := w.send(ctx, tx); err != nil {
		return err
	}
	return writeRoutes(ctx, tx, held, routes)
}

// writeRoutes writes the statuses held, a locked receipt, has for routes,
// outside a settle.
func writeRoutes(ctx context.Context, tx pgx.Tx, held *dedupe.Receipt, routes []string) error {
	if len(routes) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, mergeRoutes, held.Source, held.RequestID, held.FirstSeen, routesJSON(held.Routes, routes))
	return err
}
