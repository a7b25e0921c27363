package forward

import (
	"context"
	"math"
	"time"
)

// Rate is a route's send budget: a token bucket of Burst tokens refilled
// at Limit a second; a send takes a token. A zero Limit is no limit.
type Rate struct {
	Limit float64
	Burst int
}

// Breaker configures a route's circuit breaker. A zero Failures turns it
// off.
type Breaker struct {
	// Failures is the run of consecutive retryable failures that opens it.
	Failures int
	// Cooldown is how long it stays open the first time; each open that
	// follows without a success between doubles it, up to MaxCooldown.
	Cooldown    time.Duration
	MaxCooldown time.Duration
}

// cooldown is the open period of the opens'th consecutive open.
func (b Breaker) cooldown(opens int) time.Duration {
	d := float64(b.Cooldown) * math.Pow(2, float64(opens-1))
	return time.Duration(min(d, float64(b.MaxCooldown)))
}

// Circuit is where a route's breaker stands.
type Circuit string

const (
	Closed   Circuit = "closed"    // sends go out, under the rate
	Open     Circuit = "open"      // nothing is sent until OpenUntil
	HalfOpen Circuit = "half-open" // one probe is out; its result closes or opens it again
)

// RouteState is the state one route's sends depend on, shared by every
// forwarder of the backend. Its zero value is a closed route with a full
// bucket.
type RouteState struct {
	Paused    bool      `json:"paused"`
	Circuit   Circuit   `json:"circuit"`
	Failures  int       `json:"failures"`   // consecutive retryable failures while closed
	Opens     int       `json:"opens"`      // consecutive opens without a success: sets the cool-down
	OpenUntil time.Time `json:"open_until"` // while Open: nothing is sent before
	// Probe is the owner sending the probe while HalfOpen, until
	// ProbeUntil: an owner that dies with it does not hold the route.
	Probe      string    `json:"probe,omitempty"`
	ProbeUntil time.Time `json:"probe_until"`
	Tokens     float64   `json:"tokens"` // the rate budget left at TokensAt
	TokensAt   time.Time `json:"tokens_at"`
}

// circuit is s.Circuit, Closed for the zero value.
func (s *RouteState) circuit() Circuit {
	if s.Circuit == "" {
		return Closed
	}
	return s.Circuit
}

// Grant says how many of n sends owner may start on the route now, and
// changes s to account for them: none while paused or open; once an open
// period has ended, one probe, which owner then holds for lease; while
// closed, as many as the rate's bucket holds. probe says the one send
// granted is the probe: its result closes the breaker or opens it again.
func (s *RouteState) Grant(owner string, n int, r Rate, now time.Time, lease time.Duration) (granted int, probe bool) {
	if s.Paused || n <= 0 {
		return 0, false
	}
	switch s.circuit() {
	case Open:
		if now.Before(s.OpenUntil) {
			return 0, false
		}
	case HalfOpen:
		if now.Before(s.ProbeUntil) {
			return 0, false // a probe is out
		}
	}
	if s.circuit() != Closed {
		n = 1
	}
	granted = s.take(n, r, now)
	if granted > 0 && s.circuit() != Closed {
		s.Circuit, s.Probe, s.ProbeUntil = HalfOpen, owner, now.Add(lease)
		return granted, true
	}
	return granted, false
}

// take takes up to n tokens from the bucket, refilled to now.
func (s *RouteState) take(n int, r Rate, now time.Time) int {
	if r.Limit <= 0 {
		return n
	}
	burst := float64(max(r.Burst, 1))
	if s.TokensAt.IsZero() {
		s.Tokens = burst
	} else if elapsed := now.Sub(s.TokensAt); elapsed > 0 {
		s.Tokens = min(burst, s.Tokens+elapsed.Seconds()*r.Limit)
	}
	s.TokensAt = now
	taken := min(n, int(s.Tokens))
	s.Tokens -= float64(taken)
	return taken
}

// Release gives back what a grant to owner left unused: unused tokens go
// back into the bucket, and a probe that found nothing to send ends, so
// that the next grant may probe.
func (s *RouteState) Release(owner string, unused int, probe bool, r Rate) {
	if unused <= 0 {
		return
	}
	if r.Limit > 0 {
		s.Tokens = min(float64(max(r.Burst, 1)), s.Tokens+float64(unused))
	}
	if probe && s.circuit() == HalfOpen && s.Probe == owner {
		s.Circuit, s.Probe, s.ProbeUntil = Open, "", time.Time{}
	}
}

// Report records the outcome of one attempt on the route: up (the
// downstream answered, whatever it said: a 2xx, or a refusal that is the
// entry's own) or a retryable failure. It returns whether a failure
// counts against its entry's max_attempts: not when it opens the
// breaker, nor when the breaker is open or probing, as the route being
// down is no fault of the entry.
func (s *RouteState) Report(up bool, b Breaker, now time.Time) (counted bool) {
	if up {
		s.Circuit, s.Failures, s.Opens, s.Probe, s.ProbeUntil, s.OpenUntil = Closed, 0, 0, "", time.Time{}, time.Time{}
		return true
	}
	switch s.circuit() {
	case Open:
		return false // sent before it opened
	case HalfOpen:
		s.open(b, now)
		return false
	}
	s.Failures++
	if b.Failures > 0 && s.Failures >= b.Failures {
		s.open(b, now)
		return false
	}
	return true
}

func (s *RouteState) open(b Breaker, now time.Time) {
	s.Opens++
	s.Circuit, s.Failures, s.Probe, s.ProbeUntil = Open, 0, "", time.Time{}
	s.OpenUntil = now.Add(b.cooldown(s.Opens))
}

// Control is the backend's store of route states: atomic, and shared by
// every process using the backend, so that N replicas hold one rate
// budget and send one probe. Each call applies the RouteState rule of
// its name to the stored state in one transaction, with the backend's
// clock.
type Control interface {
	// Grant applies RouteState.Grant to target's state.
	Grant(ctx context.Context, owner string, target Target, n int, r Rate, lease time.Duration) (granted int, probe bool, err error)
	// Release applies RouteState.Release.
	Release(ctx context.Context, owner string, target Target, unused int, probe bool, r Rate) error
	// Report applies RouteState.Report, and returns the state after it.
	Report(ctx context.Context, target Target, up bool, b Breaker) (state RouteState, counted bool, err error)
	// Pause pauses or resumes target. It persists: a paused route stays
	// paused across restarts, for every replica.
	Pause(ctx context.Context, target Target, paused bool) error
	// RouteStates returns the state of every route that has one stored;
	// the others are closed, unpaused, with a full bucket.
	RouteStates(ctx context.Context) (map[Target]RouteState, error)
}
