package metrics

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd/forward"
)

// Every configured route has its gauges from the start, at zero; a route
// that is not configured has them while the store counts entries of it;
// attempts carry their route.
func TestGaugesAndAttemptsByRoute(t *testing.T) {
	billing := forward.Target{Source: "stripe", Route: "billing"}
	audit := forward.Target{Source: "stripe", Route: "audit"}
	removed := forward.Target{Source: "stripe", Route: "old"}
	m := New(Gauges{
		Routes:        []forward.Target{billing, audit},
		OutboxPending: func() (map[forward.Target]int, error) { return map[forward.Target]int{audit: 4, removed: 2}, nil },
		DeadLetters:   func() (map[forward.Target]int, error) { return nil, errors.New("store closed") },
	})
	m.Attempted(audit, "retry", 20*time.Millisecond)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	exposition := string(body)
	for _, line := range []string{
		`webhookd_outbox_pending{route="billing",source="stripe"} 0`,
		`webhookd_outbox_pending{route="audit",source="stripe"} 4`,
		`webhookd_outbox_pending{route="old",source="stripe"} 2`,
		`webhookd_forward_attempts_total{result="retry",route="audit",source="stripe"} 1`,
		`webhookd_forward_duration_seconds_count{route="audit",source="stripe"} 1`,
	} {
		if !strings.Contains(exposition, line+"\n") {
			t.Errorf("/metrics lacks %q in\n%s", line, exposition)
		}
	}
	if strings.Contains(exposition, "webhookd_dead_letters{") {
		t.Errorf("dead letters reported though the store could not count them:\n%s", exposition)
	}
}

// Each configured route has its circuit (one series per state, 1 for the
// current one), its pause and its rate, read at scrape; a route the store
// has no state for is closed and unpaused, and one without a rate has no
// rate series.
func TestRouteStateGauges(t *testing.T) {
	billing := forward.Target{Source: "stripe", Route: "billing"}
	audit := forward.Target{Source: "stripe", Route: "audit"}
	ledger := forward.Target{Source: "shop", Route: "ledger"}
	states := map[forward.Target]forward.RouteState{
		billing: {Circuit: forward.Open, OpenUntil: time.Now().Add(time.Minute), Opens: 1},
		ledger:  {Paused: true, Circuit: forward.HalfOpen},
	}
	m := New(Gauges{
		Routes:        []forward.Target{billing, audit, ledger},
		OutboxPending: func() (map[forward.Target]int, error) { return nil, nil },
		DeadLetters:   func() (map[forward.Target]int, error) { return nil, nil },
		RouteStates:   func() (map[forward.Target]forward.RouteState, error) { return states, nil },
		Rates:         map[forward.Target]forward.Rate{billing: {Limit: 200, Burst: 20}, ledger: {Limit: 0.5, Burst: 1}},
	})
	exposition := scrape(m)
	for _, line := range []string{
		`webhookd_route_circuit{route="billing",source="stripe",state="open"} 1`,
		`webhookd_route_circuit{route="billing",source="stripe",state="closed"} 0`,
		`webhookd_route_circuit{route="billing",source="stripe",state="half-open"} 0`,
		`webhookd_route_circuit{route="audit",source="stripe",state="closed"} 1`,
		`webhookd_route_circuit{route="audit",source="stripe",state="open"} 0`,
		`webhookd_route_circuit{route="ledger",source="shop",state="half-open"} 1`,
		`webhookd_route_paused{route="billing",source="stripe"} 0`,
		`webhookd_route_paused{route="audit",source="stripe"} 0`,
		`webhookd_route_paused{route="ledger",source="shop"} 1`,
		`webhookd_route_rate_limit{route="billing",source="stripe"} 200`,
		`webhookd_route_rate_limit{route="ledger",source="shop"} 0.5`,
	} {
		if !strings.Contains(exposition, line+"\n") {
			t.Errorf("/metrics lacks %q in\n%s", line, exposition)
		}
	}
	if strings.Contains(exposition, `webhookd_route_rate_limit{route="audit"`) {
		t.Errorf("a rate for a route without one:\n%s", exposition)
	}

	failing := New(Gauges{
		Routes:        []forward.Target{billing},
		OutboxPending: func() (map[forward.Target]int, error) { return nil, nil },
		DeadLetters:   func() (map[forward.Target]int, error) { return nil, nil },
		RouteStates:   func() (map[forward.Target]forward.RouteState, error) { return nil, errors.New("store closed") },
	})
	if exposition := scrape(failing); strings.Contains(exposition, "webhookd_route_circuit{") || strings.Contains(exposition, "webhookd_route_paused{") {
		t.Errorf("route states reported though the store could not read them:\n%s", exposition)
	}
}

func scrape(m *Metrics) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}
