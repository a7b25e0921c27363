package gateway

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
)

const routesConfig = `
admin: { token: "t0ken" }
sources:
  - name: stripe
    request_id: json:id
    resource: json:data.object.id
    routes:
      - name: billing
        url: http://127.0.0.1:9/billing
        filter: body.type.startsWith("invoice.")
        pass_headers: [X-Trace]
      - name: analytics
        url: http://127.0.0.1:9/analytics
      - name: audit
        url: http://127.0.0.1:9/audit
        filter: headers["x-account"] == "acct_1"
        pass_headers: [x-account, X-Trace]
  - name: github
    request_id: header:X-GitHub-Delivery
    routes:
      - url: http://127.0.0.1:9/github
        filter: headers["x-github-event"] == "push"
  - name: plain
    request_id: json:id
`

// routesOf returns the routes a receipt names, and whether it says it was
// routed nowhere.
func routesOf(t *testing.T, f *fixture, source, requestID string) (names []string, unrouted bool) {
	t.Helper()
	r, err := f.store.Receipt(context.Background(), source, requestID)
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range r.Routes {
		if rs.State != webhookd.ForwardPending {
			t.Errorf("%s/%s route %s: %s, want pending", source, requestID, rs.Route, rs.State)
		}
		names = append(names, rs.Route)
	}
	return names, r.Unrouted
}

// Intake evaluates each route's filter on the body, the headers (by any
// case of their name) and the IDs, and writes an entry for each route that
// matches, in configuration order; a delivery no route takes is accepted
// and recorded as routed nowhere, and a source without routes records
// decisions only.
func TestIntakeSelectsRoutesByFilter(t *testing.T) {
	f := newFixtureFor(t, routesConfig, nil)
	for _, tc := range []struct {
		source, body string
		headers      []string
		routes       []string
		unrouted     bool
	}{
		{"stripe", `{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1"}}}`, []string{"X-Account", "acct_1", "X-Trace", "t-1"}, []string{"billing", "analytics", "audit"}, false},
		{"stripe", `{"id":"evt_2","type":"customer.created","data":{"object":{"id":"cus_1"}}}`, []string{"X-Account", "acct_1"}, []string{"analytics", "audit"}, false},
		{"stripe", `{"id":"evt_3","type":"invoice.paid","data":{"object":{"id":"in_2"}}}`, []string{"X-ACCOUNT", "acct_2"}, []string{"billing", "analytics"}, false},
		{"github", `{}`, []string{"X-GitHub-Delivery", "gh-1", "X-GitHub-Event", "push"}, []string{"default"}, false},
		{"github", `{}`, []string{"X-GitHub-Delivery", "gh-2", "X-GitHub-Event", "issues"}, nil, true},
		{"plain", `{"id":"p-1"}`, nil, nil, false},
	} {
		expect(t, f.post(tc.source, tc.body, tc.headers...), 202, "accepted")
		id := gjsonID(tc.body, tc.headers)
		routes, unrouted := routesOf(t, f, tc.source, id)
		if !slices.Equal(routes, tc.routes) || unrouted != tc.unrouted {
			t.Errorf("%s/%s: routes %v, unrouted %v; want %v, %v", tc.source, id, routes, unrouted, tc.routes, tc.unrouted)
		}
	}
	entries, _, err := f.store.Outbox(context.Background(), forward.Target{Source: "stripe", Route: "audit"}, storage.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.RequestID)
	}
	if !slices.Equal(ids, []string{"evt_1", "evt_2"}) {
		t.Errorf("audit's outbox holds %v, want evt_1 and evt_2", ids)
	}
	// One set of headers for every route's entry: those any matching
	// route passes through. The forwarder sends each route its own.
	entries, _, err = f.store.Outbox(context.Background(), forward.Target{Source: "stripe"}, storage.Page{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		want := map[string]string{"evt_1": "t-1", "evt_2": "", "evt_3": ""}[e.RequestID]
		if got := e.Headers["X-Trace"]; got != want {
			t.Errorf("%s on %s: X-Trace %q, want %q (headers %v)", e.RequestID, e.Route, got, want, e.Headers)
		}
		if e.RequestID == "evt_1" && e.Headers["X-Account"] != "acct_1" {
			t.Errorf("evt_1 on %s: headers %v, want X-Account too", e.Route, e.Headers)
		}
	}
	// A duplicate writes nothing more, whatever its headers would select.
	expect(t, f.post("stripe", `{"id":"evt_2","type":"customer.created","data":{"object":{"id":"cus_1"}}}`, "X-Account", "acct_9"), 200, "duplicate")
	if routes, _ := routesOf(t, f, "stripe", "evt_2"); !slices.Equal(routes, []string{"analytics", "audit"}) {
		t.Errorf("after a duplicate, evt_2's routes are %v", routes)
	}
}

// gjsonID is the request ID a case of TestIntakeSelectsRoutesByFilter
// sends: its X-GitHub-Delivery header, or its body's id.
func gjsonID(body string, headers []string) string {
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "X-GitHub-Delivery" {
			return headers[i+1]
		}
	}
	return gjson.Get(body, "id").String()
}

// call sends an admin call with the token.
func (f *fixture) call(method, path string) response {
	f.t.Helper()
	req := httptest.NewRequest(method, path, nil)
	req.Header.Set("Authorization", "Bearer t0ken")
	return f.do(req)
}

// settle claims the one entry of target due and records res for it, as a
// forwarder would.
func (f *fixture) settle(target forward.Target, state webhookd.ForwardState) {
	f.t.Helper()
	ctx := context.Background()
	claims, err := f.store.Claim(ctx, "test", target, 1, time.Minute)
	if err != nil || len(claims) != 1 {
		f.t.Fatalf("claim %s: %v, %v", target, claims, err)
	}
	res := forward.Result{State: state, Attempts: 1, Status: 200, At: time.Now()}
	if state == webhookd.ForwardDead {
		res.Status, res.Error = 400, "downstream answered 400 Bad Request"
	}
	if err := f.store.Settle(ctx, claims[0], res); err != nil {
		f.t.Fatal(err)
	}
}

// items returns the request ID and route of each item of a list answer.
func items(r response) []string {
	var out []string
	list, _ := r.body["items"].([]any)
	for _, it := range list {
		m := it.(map[string]any)
		out = append(out, m["route"].(string)+":"+m["request_id"].(string))
	}
	return out
}

// The admin API lists, retries, discards and redelivers per route: one
// route's dead letter is repaired without touching the others', and a
// redelivery naming no route requeues every route it may.
func TestAdminRepairsPerRoute(t *testing.T) {
	f := newFixtureFor(t, routesConfig, nil)
	expect(t, f.post("stripe", `{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1"}}}`, "X-Account", "acct_1"), 202, "accepted")
	billing := forward.Target{Source: "stripe", Route: "billing"}
	analytics := forward.Target{Source: "stripe", Route: "analytics"}
	audit := forward.Target{Source: "stripe", Route: "audit"}

	if got := items(f.admin("/admin/outbox?source=stripe")); !slices.Equal(got, []string{"billing:evt_1", "analytics:evt_1", "audit:evt_1"}) {
		t.Errorf("stripe's outbox: %v", got)
	}
	if got := items(f.admin("/admin/outbox?source=stripe&route=audit")); !slices.Equal(got, []string{"audit:evt_1"}) {
		t.Errorf("audit's outbox: %v", got)
	}
	f.settle(billing, webhookd.ForwardDelivered)
	f.settle(analytics, webhookd.ForwardDead)
	f.settle(audit, webhookd.ForwardDead)
	if got := items(f.admin("/admin/deadletters?source=stripe&route=audit")); !slices.Equal(got, []string{"audit:evt_1"}) {
		t.Errorf("audit's dead letters: %v", got)
	}
	if got := items(f.admin("/admin/deadletters")); len(got) != 2 {
		t.Errorf("dead letters: %v, want analytics' and audit's", got)
	}

	r := f.call(http.MethodPost, "/admin/deadletters/stripe/audit/evt_1/retry")
	if r.status != 202 || r.body["route"] != "audit" || r.body["forward"] != "pending" {
		t.Errorf("retry audit's: %d %v", r.status, r.body)
	}
	r = f.call(http.MethodDelete, "/admin/deadletters/stripe/analytics/evt_1")
	if r.status != 200 || r.body["route"] != "analytics" || r.body["forward"] != "discarded" {
		t.Errorf("discard analytics': %d %v", r.status, r.body)
	}
	if r := f.call(http.MethodDelete, "/admin/deadletters/stripe/analytics/evt_1"); r.status != 404 {
		t.Errorf("discard it again: %d %v, want 404", r.status, r.body)
	}
	if got := items(f.admin("/admin/deadletters")); len(got) != 0 {
		t.Errorf("dead letters after the repairs: %v", got)
	}
	rec := f.admin("/admin/receipts/stripe/evt_1")
	states := map[string]any{}
	for _, rs := range rec.body["routes"].([]any) {
		m := rs.(map[string]any)
		states[m["route"].(string)] = m["state"]
	}
	if want := map[string]any{"billing": "delivered", "analytics": "discarded", "audit": "pending"}; !maps.Equal(states, want) {
		t.Errorf("receipt's routes: %v, want %v", states, want)
	}

	// Redeliver to one route, then to every route that may have it:
	// analytics only, as billing and audit are queued.
	r = f.call(http.MethodPost, "/admin/receipts/stripe/evt_1/redeliver?route=billing")
	if r.status != 202 || r.body["route"] != "billing" {
		t.Errorf("redeliver to billing: %d %v", r.status, r.body)
	}
	if r := f.call(http.MethodPost, "/admin/receipts/stripe/evt_1/redeliver?route=billing"); r.status != 409 {
		t.Errorf("redeliver to billing again while queued: %d %v, want 409", r.status, r.body)
	}
	r = f.call(http.MethodPost, "/admin/receipts/stripe/evt_1/redeliver")
	if r.status != 202 || r.body["route"] != nil {
		t.Errorf("redeliver to every route: %d %v", r.status, r.body)
	}
	if got := items(f.admin("/admin/outbox?source=stripe")); !slices.Equal(got, []string{"audit:evt_1", "billing:evt_1", "analytics:evt_1"}) {
		t.Errorf("outbox after the redeliveries: %v", got)
	}
	if r := f.call(http.MethodPost, "/admin/receipts/stripe/evt_1/redeliver"); r.status != 409 {
		t.Errorf("redeliver with every route queued: %d %v, want 409", r.status, r.body)
	}
}

// A route the source does not have is refused as unknown, naming the
// source's routes; route= needs source=, as route names are unique in
// their source only.
func TestAdminRefusesAnUnknownRoute(t *testing.T) {
	f := newFixtureFor(t, routesConfig, nil)
	const want = `unknown route "biling" of source stripe: its routes are billing, analytics, audit`
	for _, call := range []struct{ method, path string }{
		{http.MethodGet, "/admin/outbox?source=stripe&route=biling"},
		{http.MethodGet, "/admin/deadletters?source=stripe&route=biling"},
		{http.MethodPost, "/admin/deadletters/stripe/biling/evt_1/retry"},
		{http.MethodDelete, "/admin/deadletters/stripe/biling/evt_1"},
		{http.MethodPost, "/admin/receipts/stripe/evt_1/redeliver?route=biling"},
	} {
		r := f.call(call.method, call.path)
		if r.status != 404 || r.body["error"] != want || r.body["field"] != "route" {
			t.Errorf("%s %s: %d %v, want 404 %q blaming route", call.method, call.path, r.status, r.body, want)
		}
	}
	r := f.call(http.MethodPost, "/admin/deadletters/plain/default/p-1/retry")
	if r.status != 404 || r.body["error"] != `unknown route "default" of source plain: it has no routes` {
		t.Errorf("retry on a source without routes: %d %v", r.status, r.body)
	}
	r = f.admin("/admin/outbox?route=billing")
	if r.status != 400 || r.body["field"] != "route" {
		t.Errorf("route= without source=: %d %v, want 400 blaming route", r.status, r.body)
	}
}

// filterFailures counts FilterFailed by "source/route".
type filterFailures struct {
	nopMetrics
	mu     sync.Mutex
	counts map[string]int
}

func (m *filterFailures) FilterFailed(source, route string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[source+"/"+route]++
}

// A filter that fails on a delivery (here, it reads a field the body does
// not have without has()) does not take it, and the failure is counted;
// the other routes are not affected.
func TestAFailingFilterTakesNothingAndIsCounted(t *testing.T) {
	f := newFixtureFor(t, `
sources:
  - name: shop
    request_id: json:id
    routes:
      - name: big
        url: http://127.0.0.1:9/big
        filter: body.amount > 100
      - name: all
        url: http://127.0.0.1:9/all
`, nil)
	m := &filterFailures{counts: map[string]int{}}
	f.server.Metrics = m
	expect(t, f.post("shop", `{"id":"o-1","amount":250}`), 202, "accepted")
	expect(t, f.post("shop", `{"id":"o-2"}`), 202, "accepted")
	for id, want := range map[string][]string{"o-1": {"big", "all"}, "o-2": {"all"}} {
		if routes, _ := routesOf(t, f, "shop", id); !slices.Equal(routes, want) {
			t.Errorf("%s: routes %v, want %v", id, routes, want)
		}
	}
	if !maps.Equal(m.counts, map[string]int{"shop/big": 1}) {
		t.Errorf("filter failures %v, want one of shop/big", m.counts)
	}
}
