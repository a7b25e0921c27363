package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

const repairConfig = `
admin: { token: "t0ken" }
sources:
  - name: shop
    request_id: json:id
    resource: json:order
    version: json:v
    routes:
      - name: erp
        url: https://robot:s3cret@erp.internal:8443/hooks?key=k3y
        rate: 50/s
        burst: 10
        breaker: { failures: 5, cooldown: 30s, max_cooldown: 10m }
      - name: mail
        url: http://127.0.0.1:9/mail
  - name: plain
    request_id: json:id
`

var (
	erp  = forward.Target{Source: "shop", Route: "erp"}
	mail = forward.Target{Source: "shop", Route: "mail"}
)

// postAt posts a shop delivery received at at.
func (f *fixture) postAt(at time.Time, id, order string, v int) response {
	f.t.Helper()
	f.server.now = func() time.Time { return at }
	return f.post("shop", fmt.Sprintf(`{"id":%q,"order":%q,"v":%d}`, id, order, v))
}

// settleAll claims every due entry of target, lane head after lane head,
// and settles each with state at at, as a forwarder would; it returns the
// request IDs in the order it settled them.
func (f *fixture) settleAll(target forward.Target, state webhookd.ForwardState, at time.Time) []string {
	f.t.Helper()
	ctx := context.Background()
	var ids []string
	for {
		claims, err := f.store.Claim(ctx, "test", target, 100, time.Minute)
		if err != nil {
			f.t.Fatal(err)
		}
		if len(claims) == 0 {
			return ids
		}
		for _, c := range claims {
			res := forward.Result{State: state, Attempts: 1, Status: 200, At: at}
			if state == webhookd.ForwardDead {
				res.Status, res.Error = 400, "downstream answered 400 Bad Request"
			}
			if err := f.store.Settle(ctx, c, res); err != nil {
				f.t.Fatal(err)
			}
			ids = append(ids, c.RequestID)
		}
	}
}

// pages follows a list's next_cursor from path's first page to its last,
// failing on a page longer than limit; it returns every item's request ID
// and how many pages there were.
func (f *fixture) pages(path string, limit int) (ids []string, pages int) {
	f.t.Helper()
	cursor := ""
	for {
		r := f.admin(fmt.Sprintf("%s&limit=%d&cursor=%s", path, limit, url.QueryEscape(cursor)))
		if r.status != 200 {
			f.t.Fatalf("%s page %d: %d %v", path, pages, r.status, r.body)
		}
		list, _ := r.body["items"].([]any)
		if len(list) > limit {
			f.t.Errorf("%s page %d: %d items, over the limit %d", path, pages, len(list), limit)
		}
		for _, it := range list {
			ids = append(ids, it.(map[string]any)["request_id"].(string))
		}
		pages++
		next, ok := r.body["next_cursor"].(string)
		if !ok {
			f.t.Fatalf("%s: no next_cursor in %v", path, r.body)
		}
		if next == "" {
			return ids, pages
		}
		cursor = next
	}
}

// requestIDs returns the request ID of each item of a list answer.
func requestIDs(t *testing.T, r response) []string {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("%d %v", r.status, r.body)
	}
	var ids []string
	list, _ := r.body["items"].([]any)
	for _, it := range list {
		ids = append(ids, it.(map[string]any)["request_id"].(string))
	}
	return ids
}

// The receipts search filters by source, decision, resource, route and
// forward state and by when a receipt was first seen, newest first, and
// pages by a cursor that neither repeats nor skips a receipt while new
// ones arrive. Each item is the receipt as the single-receipt call renders
// it.
func TestAdminSearchesReceipts(t *testing.T) {
	f := newFixtureFor(t, repairConfig, nil)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	expect(t, f.postAt(at(1), "o-1", "A", 1), 202, "accepted")
	expect(t, f.postAt(at(2), "o-2", "B", 1), 202, "accepted")
	expect(t, f.postAt(at(3), "o-3", "A", 2), 202, "accepted")
	expect(t, f.postAt(at(4), "o-4", "B", 2), 202, "accepted")
	expect(t, f.postAt(at(5), "o-5", "C", 1), 202, "accepted")
	expect(t, f.postAt(at(6), "o-6", "A", 1), 200, "stale")
	f.server.now = func() time.Time { return at(7) }
	expect(t, f.post("plain", `{"id":"p-1"}`), 202, "accepted")
	// erp's lane heads: A's, B's and C's first versions.
	heads := f.settleAll(erp, webhookd.ForwardDead, time.Now())
	if len(heads) != 5 {
		t.Fatalf("settled %v on erp, want every accepted request", heads)
	}

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{"p-1", "o-6", "o-5", "o-4", "o-3", "o-2", "o-1"}},
		{"source=shop", []string{"o-6", "o-5", "o-4", "o-3", "o-2", "o-1"}},
		{"source=plain", []string{"p-1"}},
		{"source=shop&decision=stale", []string{"o-6"}},
		{"decision=accepted", []string{"p-1", "o-5", "o-4", "o-3", "o-2", "o-1"}},
		{"source=shop&resource=A", []string{"o-6", "o-3", "o-1"}},
		{"source=shop&resource=A&decision=accepted", []string{"o-3", "o-1"}},
		{"source=shop&route=erp", []string{"o-5", "o-4", "o-3", "o-2", "o-1"}},
		{"source=shop&route=erp&forward_state=dead", []string{"o-5", "o-4", "o-3", "o-2", "o-1"}},
		{"source=shop&route=mail&forward_state=pending", []string{"o-5", "o-4", "o-3", "o-2", "o-1"}},
		{"source=shop&route=mail&forward_state=dead", nil},
		{"forward_state=dead", []string{"o-5", "o-4", "o-3", "o-2", "o-1"}},
		{"since=" + url.QueryEscape(at(3).Format(time.RFC3339)) + "&until=" + url.QueryEscape(at(5).Format(time.RFC3339)), []string{"o-4", "o-3"}},
		{"since=" + url.QueryEscape(at(6).In(time.FixedZone("", 3600)).Format(time.RFC3339)), []string{"p-1", "o-6"}},
		{"until=" + at(2).UTC().Format(time.RFC3339Nano), []string{"o-1"}},
	} {
		r := f.admin("/admin/receipts?" + tc.query)
		got := requestIDs(t, r)
		if !slices.Equal(got, tc.want) {
			t.Errorf("?%s: %v, want %v", tc.query, got, tc.want)
		}
		if r.body["next_cursor"] != "" {
			t.Errorf("?%s: next_cursor %v on the one page", tc.query, r.body["next_cursor"])
		}
	}

	// Items are rendered as GET /admin/receipts/{source}/{request_id} is.
	one := f.admin("/admin/receipts/shop/o-3")
	list := f.admin("/admin/receipts?source=shop&resource=A&decision=accepted&limit=1")
	item := list.body["items"].([]any)[0].(map[string]any)
	if fmt.Sprint(item) != fmt.Sprint(one.body) {
		t.Errorf("listed receipt %v\nis not the receipt %v", item, one.body)
	}

	// Pages of 2: every receipt once, in order, though receipts arrive
	// between pages: they are newer than the cursor.
	f.server.now = time.Now
	later := 0
	postLater := func() {
		t.Helper()
		expect(t, f.post("plain", fmt.Sprintf(`{"id":"later-%d"}`, later)), 202, "accepted")
		later++
	}
	postLater()
	var ids []string
	cursor := ""
	for range 10 {
		r := f.admin("/admin/receipts?limit=2&cursor=" + url.QueryEscape(cursor))
		postLater()
		page := requestIDs(t, r)
		if len(page) > 2 {
			t.Errorf("a page of %v, over the limit", page)
		}
		ids = append(ids, page...)
		if cursor = r.body["next_cursor"].(string); cursor == "" {
			break
		}
	}
	if want := []string{"later-0", "p-1", "o-6", "o-5", "o-4", "o-3", "o-2", "o-1"}; !slices.Equal(ids, want) {
		t.Errorf("paged: %v, want %v", ids, want)
	}
	ids, pages := f.pages("/admin/receipts?source=plain", 3)
	if len(ids) != later+1 || pages < (later+1+2)/3 || ids[later] != "p-1" {
		t.Errorf("plain's %d receipts in pages of 3: %d pages of %v", later+1, pages, ids)
	}
}

// A search's parameters are checked: a misspelt value is refused, naming
// the parameter, rather than read as "nothing matches".
func TestAdminRefusesABadSearch(t *testing.T) {
	f := newFixtureFor(t, repairConfig, nil)
	expect(t, f.postAt(time.Now(), "o-1", "A", 1), 202, "accepted")
	for _, tc := range []struct {
		path   string
		status int
		field  string
	}{
		{"/admin/receipts?decision=duplicate", 400, "decision"},
		{"/admin/receipts?decision=acepted", 400, "decision"},
		{"/admin/receipts?forward_state=lost", 400, "forward_state"},
		{"/admin/receipts?since=yesterday", 400, "since"},
		{"/admin/receipts?until=2026-12-02", 400, "until"},
		{"/admin/receipts?since=2026-12-02T03:00:00+01:00", 400, "since"},
		{"/admin/receipts?since=2026-12-02T03:00:00Z&until=2026-12-02T03:00:00Z", 400, "until"},
		{"/admin/receipts?route=erp", 400, "route"},
		{"/admin/receipts?resource=A", 400, "resource"},
		{"/admin/receipts?source=shop&route=crm", 404, "route"},
		{"/admin/receipts?source=shp", 404, "source"},
		{"/admin/receipts?limit=0", 400, "limit"},
		{"/admin/receipts?limit=1001", 400, "limit"},
		{"/admin/receipts?limit=ten", 400, "limit"},
		{"/admin/receipts?cursor=not-a-cursor", 400, "cursor"},
		{"/admin/outbox?limit=-1", 400, "limit"},
		{"/admin/outbox?cursor=not-a-cursor", 400, "cursor"},
		{"/admin/deadletters?source=shop&cursor=not-a-cursor", 400, "cursor"},
	} {
		r := f.admin(tc.path)
		if r.status != tc.status || r.body["field"] != tc.field {
			t.Errorf("%s: %d %v, want %d blaming %s", tc.path, r.status, r.body, tc.status, tc.field)
		}
	}
}

// The outbox and the dead letters come in pages, in their order, each
// with the cursor of the next.
func TestAdminPagesOutboxAndDeadLetters(t *testing.T) {
	f := newFixtureFor(t, repairConfig, nil)
	var want []string
	for i := range 7 {
		id := fmt.Sprint("o-", i)
		expect(t, f.postAt(time.Now(), id, fmt.Sprint("R", i%3), i), 202, "accepted")
		want = append(want, id)
	}
	all := requestIDs(t, f.admin("/admin/outbox?source=shop&route=mail"))
	if !slices.Equal(all, want) {
		t.Fatalf("mail's outbox: %v, want %v", all, want)
	}
	for _, limit := range []int{1, 2, 3, 7, 100} {
		ids, pages := f.pages("/admin/outbox?source=shop&route=mail", limit)
		if !slices.Equal(ids, all) || pages < (len(all)+limit-1)/limit {
			t.Errorf("outbox in pages of %d: %d pages of %v, want %v", limit, pages, ids, all)
		}
	}
	f.settleAll(erp, webhookd.ForwardDead, time.Now())
	dead := requestIDs(t, f.admin("/admin/deadletters?source=shop"))
	if len(dead) != 7 {
		t.Fatalf("dead letters: %v, want erp's 7", dead)
	}
	ids, pages := f.pages("/admin/deadletters?source=shop", 2)
	if !slices.Equal(ids, dead) || pages < 4 {
		t.Errorf("dead letters in pages of 2: %d pages of %v, want %v", pages, ids, dead)
	}
	if ids, _ := f.pages("/admin/outbox?source=shop", 4); len(ids) != 7 {
		t.Errorf("shop's outbox in pages of 4: %v, want mail's 7", ids)
	}
}

// Bulk retry puts back the dead letters a route and a time range select,
// refusing, and counting, those a newer version of their resource
// superseded; bulk discard drops the rest. Each runs pages until the last.
func TestAdminRepairsDeadLettersInBulk(t *testing.T) {
	f := newFixtureFor(t, repairConfig, nil)
	// A's versions 1 and 2, and B..F's version 1.
	expect(t, f.postAt(time.Now(), "a-1", "A", 1), 202, "accepted")
	expect(t, f.postAt(time.Now(), "a-2", "A", 2), 202, "accepted")
	for _, order := range []string{"B", "C", "D", "E", "F"} {
		expect(t, f.postAt(time.Now(), "x-"+order, order, 1), 202, "accepted")
	}
	night := time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Second)
	f.settleAll(erp, webhookd.ForwardDead, night)
	// mail's dead letters die later, outside the range retried below.
	f.settleAll(mail, webhookd.ForwardDead, time.Now())

	for _, tc := range []struct {
		path   string
		status int
		field  string
	}{
		{"/admin/deadletters/retry?route=erp", 400, "route"},
		{"/admin/deadletters/retry?source=shop&route=crm", 404, "route"},
		{"/admin/deadletters/discard?source=shp", 404, "source"},
		{"/admin/deadletters/retry?source=shop&since=tonight", 400, "since"},
	} {
		if r := f.call(http.MethodPost, tc.path); r.status != tc.status || r.body["field"] != tc.field {
			t.Errorf("POST %s: %d %v, want %d blaming %s", tc.path, r.status, r.body, tc.status, tc.field)
		}
	}
	if r := f.call(http.MethodGet, "/admin/deadletters/retry"); r.status != 405 {
		t.Errorf("GET a bulk retry: %d %v, want 405", r.status, r.body)
	}

	rng := "&since=" + url.QueryEscape(night.Add(-time.Minute).Format(time.RFC3339)) + "&until=" + url.QueryEscape(night.Add(time.Minute).Format(time.RFC3339))
	r := f.call(http.MethodPost, "/admin/deadletters/retry?source=shop"+rng)
	if r.status != 202 || r.body["retried"] != 6.0 || r.body["refused"] != 1.0 {
		t.Errorf("bulk retry: %d %v, want 202 with 6 retried, a-1 refused", r.status, r.body)
	}
	if got := requestIDs(t, f.admin("/admin/outbox?source=shop&route=erp")); !slices.Equal(got, []string{"a-2", "x-B", "x-C", "x-D", "x-E", "x-F"}) {
		t.Errorf("erp's outbox after the retry: %v", got)
	}
	if got := items(f.admin("/admin/deadletters?source=shop")); len(got) != 8 || !slices.Contains(got, "erp:a-1") {
		t.Errorf("dead letters after the retry: %v, want erp's a-1 and mail's 7", got)
	}
	rec := f.admin("/admin/receipts/shop/x-B")
	if forwardStateOf(rec, "erp") != "pending" || forwardStateOf(rec, "mail") != "dead" {
		t.Errorf("x-B's receipt after the retry: %v", rec.body["routes"])
	}

	// Again: nothing more to retry there but the refused one.
	r = f.call(http.MethodPost, "/admin/deadletters/retry?source=shop&route=erp")
	if r.status != 202 || r.body["retried"] != 0.0 || r.body["refused"] != 1.0 {
		t.Errorf("bulk retry again: %d %v, want a-1 refused again", r.status, r.body)
	}
	r = f.call(http.MethodPost, "/admin/deadletters/discard?source=shop&route=mail")
	if r.status != 200 || r.body["discarded"] != 7.0 || r.body["refused"] != 0.0 {
		t.Errorf("bulk discard of mail's: %d %v, want 7 discarded", r.status, r.body)
	}
	r = f.call(http.MethodPost, "/admin/deadletters/discard")
	if r.status != 200 || r.body["discarded"] != 1.0 {
		t.Errorf("bulk discard of all: %d %v, want a-1 discarded", r.status, r.body)
	}
	if got := items(f.admin("/admin/deadletters")); len(got) != 0 {
		t.Errorf("dead letters after the discards: %v", got)
	}
	if forwardStateOf(f.admin("/admin/receipts/shop/x-B"), "mail") != "discarded" {
		t.Errorf("x-B's mail route not discarded")
	}
}

// Bulk retry goes through every page: more dead letters than a page of
// bulkPage all go back, each resource's versions in order.
func TestAdminRetriesManyDeadLetters(t *testing.T) {
	f := newFixtureFor(t, `
admin: { token: "t0ken" }
sources:
  - name: feed
    request_id: json:id
    resource: json:item
    routes:
      - url: http://127.0.0.1:9/feed
`, nil)
	const total, resources = 2*bulkPage + 37, 17
	var want []string
	for i := range total {
		id := fmt.Sprint("f-", i)
		expect(t, f.post("feed", fmt.Sprintf(`{"id":%q,"item":"i-%d"}`, id, i%resources)), 202, "accepted")
		want = append(want, id)
	}
	feed := forward.Target{Source: "feed", Route: "default"}
	f.settleAll(feed, webhookd.ForwardDead, time.Now())
	r := f.call(http.MethodPost, "/admin/deadletters/retry?source=feed")
	if r.status != 202 || r.body["retried"] != float64(total) || r.body["refused"] != 0.0 {
		t.Fatalf("bulk retry: %d %v, want all %d retried", r.status, r.body, total)
	}
	if n := len(items(f.admin("/admin/deadletters"))); n != 0 {
		t.Errorf("%d dead letters left", n)
	}
	// Settled lane head after lane head, each resource's come in order.
	got := f.settleAll(feed, webhookd.ForwardDelivered, time.Now())
	if len(got) != total {
		t.Fatalf("%d entries back in the outbox, want %d", len(got), total)
	}
	last := map[int]int{}
	for _, id := range got {
		var i int
		fmt.Sscanf(id, "f-%d", &i)
		if prev, ok := last[i%resources]; ok && prev > i {
			t.Errorf("item i-%d: f-%d came after f-%d", i%resources, i, prev)
		}
		last[i%resources] = i
	}
}

// forwardStateOf returns the state of route in a receipt answer.
func forwardStateOf(r response, route string) any {
	routes, _ := r.body["routes"].([]any)
	for _, rs := range routes {
		if m := rs.(map[string]any); m["route"] == route {
			return m["state"]
		}
	}
	return nil
}

// routeOf returns the item of GET /admin/routes for target.
func (f *fixture) routeOf(target forward.Target) map[string]any {
	f.t.Helper()
	r := f.admin("/admin/routes")
	if r.status != 200 {
		f.t.Fatalf("routes: %d %v", r.status, r.body)
	}
	for _, it := range r.body["items"].([]any) {
		if m := it.(map[string]any); m["source"] == target.Source && m["route"] == target.Route {
			return m
		}
	}
	f.t.Fatalf("routes: no %s in %v", target, r.body)
	return nil
}

// GET /admin/routes shows each configured route: where it sends without
// the URL's credentials, its limits, its breaker's state and its backlog.
func TestAdminShowsRoutes(t *testing.T) {
	f := newFixtureFor(t, repairConfig, nil)
	for i := range 3 {
		expect(t, f.postAt(time.Now(), fmt.Sprint("o-", i), fmt.Sprint("R", i), 1), 202, "accepted")
	}
	f.settleAll(mail, webhookd.ForwardDead, time.Now())
	r := f.admin("/admin/routes")
	var names []string
	for _, it := range r.body["items"].([]any) {
		m := it.(map[string]any)
		names = append(names, m["source"].(string)+"/"+m["route"].(string))
	}
	if r.status != 200 || !slices.Equal(names, []string{"shop/erp", "shop/mail"}) {
		t.Fatalf("routes: %d %v, want shop's erp and mail", r.status, r.body)
	}
	got := f.routeOf(erp)
	want := map[string]any{
		"host": "erp.internal:8443", "rate": "50/s", "burst": 10.0,
		"paused": false, "circuit": "closed", "failures": 0.0, "pending": 3.0, "dead_letters": 0.0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("erp's %s: %v, want %v (%v)", k, got[k], v, got)
		}
	}
	if b, _ := got["breaker"].(map[string]any); b["failures"] != 5.0 || b["cooldown"] != "30s" || b["max_cooldown"] != "10m0s" {
		t.Errorf("erp's breaker: %v", got["breaker"])
	}
	if m := f.routeOf(mail); m["pending"] != 0.0 || m["dead_letters"] != 3.0 || m["host"] != "127.0.0.1:9" {
		t.Errorf("mail: %v, want its 3 dead letters", m)
	}
	for _, secret := range []string{"robot", "s3cret", "k3y", "/hooks"} {
		if raw := fmt.Sprint(r.body); strings.Contains(raw, secret) {
			t.Errorf("routes show %q of a URL: %s", secret, raw)
		}
	}

	// Failures open erp's breaker.
	before := time.Now()
	b := forward.Breaker{Failures: 2, Cooldown: time.Hour, MaxCooldown: time.Hour}
	for range 2 {
		if _, _, err := f.store.Report(context.Background(), erp, false, b); err != nil {
			t.Fatal(err)
		}
	}
	got = f.routeOf(erp)
	until, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got["open_until"]))
	if got["circuit"] != "open" || err != nil || until.Before(before.Add(time.Hour)) {
		t.Errorf("erp after its breaker opened: %v", got)
	}
	if m := f.routeOf(mail); m["circuit"] != "closed" || m["open_until"] != nil {
		t.Errorf("mail, whose breaker did not open: %v", m)
	}
}

// Pause stops grants to a route, persists across a restart of the store,
// and resume lets them go again; a route the source does not have is
// refused as in the other route calls.
func TestAdminPausesAndResumesARoute(t *testing.T) {
	dir := t.TempDir()
	f := newFixtureIn(t, repairConfig, dir, nil)
	ctx := context.Background()
	grant := func(f *fixture) int {
		t.Helper()
		n, _, err := f.store.Grant(ctx, "test", erp, 5, forward.Rate{}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			if err := f.store.Release(ctx, "test", erp, n, false, forward.Rate{}); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	r := f.call(http.MethodPost, "/admin/routes/shop/erp/pause")
	if r.status != 200 || r.body["source"] != "shop" || r.body["route"] != "erp" || r.body["paused"] != true {
		t.Fatalf("pause: %d %v", r.status, r.body)
	}
	if got := f.routeOf(erp); got["paused"] != true {
		t.Errorf("erp after pause: %v", got)
	}
	if f.routeOf(mail)["paused"] != false {
		t.Errorf("pausing erp paused mail")
	}
	if n := grant(f); n != 0 {
		t.Errorf("paused: %d sends granted", n)
	}
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	f = newFixtureIn(t, repairConfig, dir, nil)
	if got := f.routeOf(erp); got["paused"] != true {
		t.Errorf("erp after a restart: %v, want still paused", got)
	}
	if n := grant(f); n != 0 {
		t.Errorf("paused after a restart: %d sends granted", n)
	}
	r = f.call(http.MethodPost, "/admin/routes/shop/erp/resume")
	if r.status != 200 || r.body["paused"] != false {
		t.Fatalf("resume: %d %v", r.status, r.body)
	}
	if got := f.routeOf(erp); got["paused"] != false {
		t.Errorf("erp after resume: %v", got)
	}
	if n := grant(f); n != 5 {
		t.Errorf("resumed: %d of 5 sends granted", n)
	}

	for _, tc := range []struct {
		method, path string
		status       int
		field        string
	}{
		{http.MethodPost, "/admin/routes/shop/crm/pause", 404, "route"},
		{http.MethodPost, "/admin/routes/plain/default/pause", 404, "route"},
		{http.MethodPost, "/admin/routes/shp/erp/resume", 404, "source"},
		{http.MethodGet, "/admin/routes/shop/erp/pause", 405, ""},
	} {
		r := f.call(tc.method, tc.path)
		if r.status != tc.status || (tc.field != "" && r.body["field"] != tc.field) {
			t.Errorf("%s %s: %d %v, want %d blaming %q", tc.method, tc.path, r.status, r.body, tc.status, tc.field)
		}
	}
}
