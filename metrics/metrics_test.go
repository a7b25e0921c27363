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
