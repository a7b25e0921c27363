package gateway

import (
	"slices"
	"strings"
	"testing"
)

// Versions to the second: two changes of one invoice in the same second
// are both applied where the source accepts ties, in arrival order; an
// older one is still stale.
func TestTiesWhereTheSourceAcceptsThem(t *testing.T) {
	f := newFixtureFor(t, `
admin: { token: "t0ken" }
sources:
  - name: invoices
    request_id: json:id
    resource: json:data.object.id
    version: json:data.object.updated_at
    version_format: timestamp
    version_ties: accept
  - name: strict
    request_id: json:id
    resource: json:data.object.id
    version: json:data.object.updated_at
    version_format: timestamp
`, nil)
	event := func(id, at string) string {
		return `{"id":"` + id + `","data":{"object":{"id":"in_1","updated_at":"` + at + `"}}}`
	}
	for _, step := range []struct {
		source, id, at string
		status         int
		decision       string
	}{
		{"invoices", "created", "2026-12-01T10:00:00Z", 202, "accepted"},
		{"invoices", "finalized", "2026-12-01T10:00:00Z", 202, "accepted"},
		{"invoices", "earlier", "2026-12-01T09:59:59Z", 200, "stale"},
		{"strict", "created", "2026-12-01T10:00:00Z", 202, "accepted"},
		{"strict", "finalized", "2026-12-01T10:00:00Z", 200, "stale"},
	} {
		expect(t, f.post(step.source, event(step.id, step.at)), step.status, step.decision)
	}
	rec := f.admin("/admin/receipts/invoices/finalized")
	if rec.body["ordering_decision"] != "tie" || rec.body["reason"] != "request ID not seen before; version 2026-12-01T10:00:00Z equals the latest accepted version 2026-12-01T10:00:00Z; ties are accepted in arrival order" {
		t.Errorf("tied receipt = %v", rec.body)
	}
	risks, _ := rec.body["residual_risk"].([]any)
	if !slices.ContainsFunc(risks, func(r any) bool { s, _ := r.(string); return strings.Contains(s, "ordered by arrival") }) {
		t.Errorf("tied receipt's residual risk %v does not name arrival order", risks)
	}
	if res := f.admin("/admin/resources/invoices/in_1"); res.body["request_id"] != "finalized" {
		t.Errorf("latest = %v, want the tied version of finalized", res.body)
	}
	if res := f.admin("/admin/resources/strict/in_1"); res.body["request_id"] != "created" {
		t.Errorf("strict latest = %v, want created", res.body)
	}
}
