package console

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

// routeSummary is one route of a source on the overview: its state, its
// rate, its outbox (the backlog) and its dead letters.
type routeSummary struct {
	Route  string
	Filter string // the queue pages' filter that shows this route
	Outbox int    // -1: not known
	Dead   int    // -1: not known
	// Gone says the configuration no longer has the route: nothing
	// forwards its entries (the forwarder dead-letters them), and it has
	// neither rate nor state to show.
	Gone  bool
	Rate  string      // in words
	State *routeState // nil: not known
}

// routeState is where a route's sends stand, as the overview words it.
type routeState struct {
	Paused  bool
	Circuit forward.Circuit
	// OpenUntil is the end of an open breaker's cool-down; CooledDown says
	// it has passed, so that the next send is the probe.
	OpenUntil  time.Time
	CooledDown bool
}

func stateOf(s forward.RouteState, now time.Time) *routeState {
	rs := &routeState{Paused: s.Paused, Circuit: s.Circuit}
	if rs.Circuit == "" {
		rs.Circuit = forward.Closed
	}
	if rs.Circuit == forward.Open {
		rs.OpenUntil, rs.CooledDown = s.OpenUntil, !now.Before(s.OpenUntil)
	}
	return rs
}

// routeFacts are what the overview reads of every route; a map is nil
// when it could not be read.
type routeFacts struct {
	pending, dead map[forward.Target]int
	states        map[forward.Target]forward.RouteState
}

// readRoutes reads the routes' queues and states, and why either could
// not be read.
func (c *Console) readRoutes(ctx context.Context) (f routeFacts, queuesErr, statesErr error) {
	pending, queuesErr := c.records.Pending(ctx)
	var dead map[forward.Target]int
	if queuesErr == nil {
		dead, queuesErr = c.records.DeadLetterCounts()
	}
	if queuesErr == nil {
		f.pending, f.dead = orEmpty(pending), orEmpty(dead)
	}
	states, statesErr := c.records.RouteStates(ctx)
	if statesErr == nil {
		f.states = orEmpty(states)
	}
	return f, queuesErr, statesErr
}

func orEmpty[V any](m map[forward.Target]V) map[forward.Target]V {
	if m == nil {
		return map[forward.Target]V{}
	}
	return m
}

// of returns each of s's routes, in configuration order, then those the
// configuration no longer has that still hold entries.
func (f routeFacts) of(s Source, now time.Time) []routeSummary {
	var out []routeSummary
	add := func(route string, gone bool) {
		t := forward.Target{Source: s.Name, Route: route}
		rs := routeSummary{Route: route, Filter: t.String(), Outbox: -1, Dead: -1, Gone: gone}
		if f.pending != nil {
			rs.Outbox, rs.Dead = f.pending[t], f.dead[t]
		}
		if r := s.Route(route); r != nil {
			rs.Rate = r.rateWords()
		}
		if f.states != nil && !gone {
			rs.State = stateOf(f.states[t], now)
		}
		out = append(out, rs)
	}
	for _, r := range s.Routes {
		add(r.Name, false)
	}
	var gone []string
	for _, m := range []map[forward.Target]int{f.pending, f.dead} {
		for t := range m {
			if t.Source == s.Name && s.Route(t.Route) == nil && !slices.Contains(gone, t.Route) {
				gone = append(gone, t.Route)
			}
		}
	}
	slices.Sort(gone)
	for _, r := range gone {
		add(r, true)
	}
	return out
}

// rateWords words r's rate limit.
func (r *Route) rateWords() string {
	switch {
	case r.Rate == "":
		return "no rate limit"
	case r.Burst > 0:
		return r.Rate + ", burst " + strconv.Itoa(r.Burst)
	}
	return r.Rate
}

func (c *Console) handlePause(fc *fiber.Ctx) error {
	return c.pause(fc, true)
}

func (c *Console) handleResume(fc *fiber.Ctx) error {
	return c.pause(fc, false)
}

// pause pauses or resumes the configured route the form names, and shows
// the overview with what that does.
func (c *Console) pause(fc *fiber.Ctx, paused bool) error {
	target := forward.Target{Source: form(fc, "source"), Route: form(fc, "route")}
	verb := "Not resumed: "
	if paused {
		verb = "Not paused: "
	}
	i := slices.IndexFunc(c.sources, func(s Source) bool { return s.Name == target.Source })
	if i < 0 || c.sources[i].Route(target.Route) == nil {
		return c.overview(fc, fiber.StatusNotFound, &notice{Text: verb + "no route " + target.Route + " of source " + target.Source + " is configured."})
	}
	if err := c.records.Pause(fc.UserContext(), target, paused); err != nil {
		return c.overview(fc, statusOf(err), &notice{Text: verb + webhookd.ErrorMessage(err)})
	}
	if paused {
		return c.overview(fc, fiber.StatusOK, &notice{OK: true, Text: target.String() + " is paused: its accepted deliveries are recorded and queued, and nothing is sent to it until it is resumed, on every replica and across restarts."})
	}
	return c.overview(fc, fiber.StatusOK, &notice{OK: true, Text: target.String() + " is resumed: its backlog drains in order, each resource's versions oldest first, under its rate limit."})
}
