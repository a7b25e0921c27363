package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhookd/webhookd/forward"
)

// Route states (forward.Control): one row of webhookd_routes a route.
const (
	routeColumns = `paused, circuit, failures, opens, open_until, probe, probe_until, tokens, tokens_at`

	// insertRoute makes sure the route has a row to lock: a route never
	// seen has the zero state.
	insertRoute = `INSERT INTO webhookd_routes (source, route) VALUES ($1, $2) ON CONFLICT (source, route) DO NOTHING`

	// lockRoute reads a route's state and holds its row until commit:
	// every replica's Grant, Release and Report of the route take turns.
	lockRoute = readRoute + ` FOR UPDATE`

	readRoute = `SELECT ` + routeColumns + ` FROM webhookd_routes WHERE source = $1 AND route = $2`

	writeRoute = `UPDATE webhookd_routes SET paused = $3, circuit = $4, failures = $5, opens = $6, open_until = $7,
		probe = $8, probe_until = $9, tokens = $10, tokens_at = $11
	WHERE source = $1 AND route = $2`

	pauseRoute = `INSERT INTO webhookd_routes (source, route, paused) VALUES ($1, $2, $3)
	ON CONFLICT (source, route) DO UPDATE SET paused = excluded.paused`

	listRoutes = `SELECT source, route, ` + routeColumns + ` FROM webhookd_routes`
)

// Grant applies forward.RouteState.Grant to target's stored state.
func (s *Store) Grant(ctx context.Context, owner string, target forward.Target, n int, r forward.Rate, lease time.Duration) (granted int, probe bool, err error) {
	// Most grants change nothing: a closed route without a rate grants
	// what is asked, a paused or open one nothing, and its state stays
	// as it is. Such a grant reads the state without a lock or a
	// transaction, one round trip where the locked change takes four; a
	// claim follows every grant, so this is on the forwarding path. A
	// pause that lands between the read and the claim holds from the
	// next grant.
	was, err := s.readRoute(ctx, target)
	if err != nil {
		return 0, false, fmt.Errorf("grant %s: %w", target, err)
	}
	trial := was
	granted, probe = trial.Grant(owner, n, r, s.Now(), lease)
	if stored(trial) == was {
		return granted, probe, nil
	}
	_, err = s.changeRoute(ctx, target, func(st *forward.RouteState, now time.Time) {
		// A replica whose clock lags another's would set the bucket's
		// time back, and the next grant elsewhere would refill the same
		// interval twice: the bucket's time only moves forward.
		if now.Before(st.TokensAt) {
			now = st.TokensAt
		}
		granted, probe = st.Grant(owner, n, r, now, lease)
	})
	if err != nil {
		return 0, false, fmt.Errorf("grant %s: %w", target, err)
	}
	return granted, probe, nil
}

// Release applies forward.RouteState.Release to target's stored state.
func (s *Store) Release(ctx context.Context, owner string, target forward.Target, unused int, probe bool, r forward.Rate) error {
	// Without a rate and a probe, the rule has nothing to give back: the
	// forwarder's release after a claim of fewer than granted then costs
	// no transaction.
	if unused <= 0 || r.Limit <= 0 && !probe {
		return nil
	}
	_, err := s.changeRoute(ctx, target, func(st *forward.RouteState, _ time.Time) {
		st.Release(owner, unused, probe, r)
	})
	if err != nil {
		return fmt.Errorf("release %s: %w", target, err)
	}
	return nil
}

// Report applies forward.RouteState.Report to target's stored state and
// returns the state it leaves.
func (s *Store) Report(ctx context.Context, target forward.Target, up bool, b forward.Breaker) (state forward.RouteState, counted bool, err error) {
	state, err = s.changeRoute(ctx, target, func(st *forward.RouteState, now time.Time) {
		counted = st.Report(up, b, now)
	})
	if err != nil {
		return forward.RouteState{}, false, fmt.Errorf("report %s: %w", target, err)
	}
	return state, counted, nil
}

// Pause pauses or resumes target for every replica, until changed again.
func (s *Store) Pause(ctx context.Context, target forward.Target, paused bool) error {
	if err := s.available(); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, pauseRoute, target.Source, target.Route, paused); err != nil {
		return fmt.Errorf("pause %s: %w", target, unavailable(err))
	}
	signal(s.notify)
	return nil
}

// RouteStates returns the stored state of every route that has one.
func (s *Store) RouteStates(ctx context.Context) (map[forward.Target]forward.RouteState, error) {
	if err := s.available(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, listRoutes)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rows.Close()
	states := make(map[forward.Target]forward.RouteState)
	for rows.Next() {
		var t forward.Target
		st, err := scanRoute(rows, &t.Source, &t.Route)
		if err != nil {
			return nil, unavailable(err)
		}
		states[t] = st
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(err)
	}
	return states, nil
}

// readRoute returns target's state as stored, the zero state when it has
// none, without a lock.
func (s *Store) readRoute(ctx context.Context, target forward.Target) (forward.RouteState, error) {
	if err := s.available(); err != nil {
		return forward.RouteState{}, err
	}
	st, err := scanRoute(s.pool.QueryRow(ctx, readRoute, target.Source, target.Route))
	if errors.Is(err, pgx.ErrNoRows) {
		return forward.RouteState{}, nil
	}
	if err != nil {
		s.observe(err)
		return forward.RouteState{}, unavailable(err)
	}
	return st, nil
}

// changeRoute applies change to target's state in one transaction: it
// locks the route's row, made first if the route has none, changes the
// state with the store's clock, and writes it back if it changed. It
// returns the state as stored.
func (s *Store) changeRoute(ctx context.Context, target forward.Target, change func(st *forward.RouteState, now time.Time)) (forward.RouteState, error) {
	if err := s.available(); err != nil {
		return forward.RouteState{}, err
	}
	var st forward.RouteState
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertRoute, target.Source, target.Route); err != nil {
			return err
		}
		was, err := scanRoute(tx.QueryRow(ctx, lockRoute, target.Source, target.Route))
		if err != nil {
			return err
		}
		// The clock is read under the lock, so that calls on one replica
		// apply in the order of their times.
		st = was
		change(&st, s.Now().Truncate(time.Microsecond).UTC())
		st = stored(st)
		if st == was {
			return nil
		}
		_, err = tx.Exec(ctx, writeRoute, append([]any{target.Source, target.Route}, routeArgs(&st)...)...)
		return err
	})
	if err != nil {
		s.observe(err)
		return forward.RouteState{}, unavailable(err)
	}
	return st, nil
}

// stored is st as the table keeps it: times in UTC to the microsecond,
// so that a state compares equal to the one read back.
func stored(st forward.RouteState) forward.RouteState {
	for _, t := range []*time.Time{&st.OpenUntil, &st.ProbeUntil, &st.TokensAt} {
		if !t.IsZero() {
			*t = t.Truncate(time.Microsecond).UTC()
		}
	}
	return st
}

// routeArgs are the values of routeColumns; a zero time is NULL.
func routeArgs(st *forward.RouteState) []any {
	return []any{st.Paused, string(st.Circuit), st.Failures, st.Opens, nullTime(st.OpenUntil), st.Probe,
		nullTime(st.ProbeUntil), st.Tokens, nullTime(st.TokensAt)}
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// scanRoute reads what comes first in dest, then routeColumns.
func scanRoute(row pgx.Row, dest ...any) (forward.RouteState, error) {
	var st forward.RouteState
	var circuit string
	var openUntil, probeUntil, tokensAt *time.Time
	err := row.Scan(append(dest, &st.Paused, &circuit, &st.Failures, &st.Opens, &openUntil, &st.Probe, &probeUntil,
		&st.Tokens, &tokensAt)...)
	if err != nil {
		return st, err
	}
	st.Circuit = forward.Circuit(circuit)
	for _, t := range []struct {
		to   *time.Time
		from *time.Time
	}{{&st.OpenUntil, openUntil}, {&st.ProbeUntil, probeUntil}, {&st.TokensAt, tokensAt}} {
		if t.from != nil {
			*t.to = t.from.UTC()
		}
	}
	return st, nil
}
