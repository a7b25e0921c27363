package store

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/webhookd/webhookd/forward"
)

// control holds the routes' states (forward.Control). This process is
// its directory's only user, so the states live in memory, except a
// pause, which Pause writes to its key and Open reads back: a restart
// closes every breaker and refills every bucket, as a route that was
// failing is then probed by its first sends, while a paused route stays
// paused.
type control struct {
	mu     sync.Mutex
	states map[forward.Target]forward.RouteState
	// pausing serialises Pause, so that the states follow the pause keys
	// in the order their writes commit.
	pausing sync.Mutex
}

// apply runs rule on target's state under the lock, with the time read
// under it too, so that the states see time in the order they change.
func (c *control) apply(target forward.Target, clock func() time.Time, rule func(st *forward.RouteState, now time.Time)) forward.RouteState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.states[target]
	rule(&st, clock())
	c.states[target] = st
	return st
}

// Grant applies forward.RouteState.Grant to target's state.
func (s *Store) Grant(ctx context.Context, owner string, target forward.Target, n int, r forward.Rate, lease time.Duration) (granted int, probe bool, err error) {
	if err := s.readable(); err != nil {
		return 0, false, err
	}
	s.control.apply(target, s.Now, func(st *forward.RouteState, now time.Time) { granted, probe = st.Grant(owner, n, r, now, lease) })
	return granted, probe, nil
}

// Release applies forward.RouteState.Release.
func (s *Store) Release(ctx context.Context, owner string, target forward.Target, unused int, probe bool, r forward.Rate) error {
	if err := s.readable(); err != nil {
		return err
	}
	s.control.apply(target, s.Now, func(st *forward.RouteState, _ time.Time) { st.Release(owner, unused, probe, r) })
	return nil
}

// Report applies forward.RouteState.Report.
func (s *Store) Report(ctx context.Context, target forward.Target, up bool, b forward.Breaker) (state forward.RouteState, counted bool, err error) {
	if err := s.readable(); err != nil {
		return state, false, err
	}
	state = s.control.apply(target, s.Now, func(st *forward.RouteState, now time.Time) { counted = st.Report(up, b, now) })
	return state, counted, nil
}

// Pause pauses or resumes target: its pause key is written, or deleted,
// and synced before the state changes.
func (s *Store) Pause(ctx context.Context, target forward.Target, paused bool) error {
	s.control.pausing.Lock()
	defer s.control.pausing.Unlock()
	err := s.update(func(t *tx) error {
		if paused {
			t.setRaw(controlKey(target), nil, 0)
		} else {
			t.delete(controlKey(target))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pause %s: %w", target, err)
	}
	s.control.apply(target, s.Now, func(st *forward.RouteState, _ time.Time) { st.Paused = paused })
	return nil
}

// RouteStates returns the state of every route that has one.
func (s *Store) RouteStates(ctx context.Context) (map[forward.Target]forward.RouteState, error) {
	if err := s.readable(); err != nil {
		return nil, err
	}
	s.control.mu.Lock()
	defer s.control.mu.Unlock()
	return maps.Clone(s.control.states), nil
}

// loadControl reads the paused routes, at Open.
func (s *Store) loadControl() error {
	s.control.states = make(map[forward.Target]forward.RouteState)
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixControl}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			tg := controlTarget(it.Item().Key())
			s.control.states[tg] = forward.RouteState{Paused: true}
		}
		return nil
	})
}
