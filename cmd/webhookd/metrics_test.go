package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestMetricsAfterKnownTraffic sends a known mix of deliveries and checks
// the exact values /metrics reports for it, without the admin token.
func TestMetricsAfterKnownTraffic(t *testing.T) {
	var calls atomic.Int32
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the first attempt fails once
		}
	}))
	defer down.Close()
	m, c := startMain(t, testConfig(t, t.TempDir(), down.URL, "127.0.0.1:0", "127.0.0.1:0"))
	defer m.Close(context.Background())

	c.post("billing", billing("r1", "o1", 1))                            // accepted
	c.post("billing", billing("r1", "o1", 1))                            // duplicate
	c.post("billing", billing("r2", "o1", 2))                            // accepted
	c.post("billing", billing("r0", "o1", 1))                            // stale
	c.post("billing", billing("r2", "o1", 3))                            // conflict
	c.post("billing", `{"object":{"id":"o1","version":4}}`)              // invalid: no request ID
	c.post("nope", `{}`)                                                 // unknown source
	c.post("nope-either", `{}`)                                          // unknown source
	c.send(http.MethodGet, "http://"+c.public+"/hooks/billing", "", nil) // invalid: method
	waitFor(t, "forwarding", func() bool { return len(c.items("/admin/outbox")) == 0 })

	resp, err := http.Get("http://" + c.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics without a token: %d", resp.StatusCode)
	}
	exposition := string(raw)
	for _, line := range []string{
		`webhookd_deliveries_total{decision="accepted",source="billing"} 2`,
		`webhookd_deliveries_total{decision="duplicate",source="billing"} 1`,
		`webhookd_deliveries_total{decision="stale",source="billing"} 1`,
		`webhookd_deliveries_total{decision="conflict",source="billing"} 1`,
		`webhookd_rejections_total{reason="invalid",source="billing"} 2`,
		`webhookd_rejections_total{reason="unknown_source",source="unknown"} 2`,
		`webhookd_intake_duration_seconds_count{source="billing"} 7`,
		`webhookd_intake_duration_seconds_count{source="unknown"} 2`,
		`webhookd_forward_attempts_total{result="retry",route="default",source="billing"} 1`,
		`webhookd_forward_attempts_total{result="delivered",route="default",source="billing"} 2`,
		`webhookd_forward_duration_seconds_count{route="default",source="billing"} 3`,
		`webhookd_outbox_pending{route="default",source="billing"} 0`,
		`webhookd_dead_letters{route="default",source="billing"} 0`,
		`webhookd_disk_low 0`,
		`webhookd_disk_low_total 0`,
	} {
		if !strings.Contains(exposition, line+"\n") {
			t.Errorf("/metrics lacks %q in\n%s", line, exposition)
		}
	}
	// A source without routes has no forwarding series.
	if strings.Contains(exposition, `source="audit"`) {
		t.Errorf("/metrics has series of audit, a source without routes:\n%s", exposition)
	}
	for _, name := range []string{"webhookd_badger_lsm_bytes", "webhookd_badger_vlog_bytes",
		"webhookd_disk_free_bytes", "webhookd_disk_ballast_bytes", "webhookd_disk_reserve_bytes", "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(exposition, "\n"+name+" ") {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	// Without its store, webhookd still answers a scrape, with the
	// counters that tell of it.
	m.Store.Close()
	c.post("billing", billing("r3", "o1", 5))
	resp, err = http.Get("http://" + c.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ = io.ReadAll(resp.Body)
	if want := `webhookd_rejections_total{reason="unavailable",source="billing"} 1`; resp.StatusCode != 200 || !strings.Contains(string(raw), want+"\n") {
		t.Errorf("/metrics without a store: %d, want 200 with %q in\n%s", resp.StatusCode, want, raw)
	}
}
