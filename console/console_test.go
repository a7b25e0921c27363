package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/store"
	"github.com/webhookd/webhookd/versioning"
)

const token = "s3cret-token"

// clock is a settable time, for sessions and the per-minute history.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type fixture struct {
	t       *testing.T
	console *Console
	store   *store.Store
	clock   *clock
	app     *fiber.App
	// warehouse counts the requests billing's warehouse downstream took,
	// by Idempotency-Key.
	warehouse *counter
}

type counter struct {
	mu   sync.Mutex
	took map[string]int
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.took[r.Header.Get("Idempotency-Key")]++
}

func (c *counter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.took[key]
}

// sources: billing forwards to two routes, crm, which dead-letters at its
// first refusal, and warehouse, whose downstream takes everything; ledger
// forwards to one route and retries for an hour; audit records only.
var sources = []Source{{Name: "billing", Routes: []Route{{Name: "crm", Rate: "50/s", Burst: 10}, {Name: "warehouse"}}}, {Name: "ledger", Routes: []Route{{Name: "default", Rate: "30/m"}}}, {Name: "audit"}}

var (
	crm       = forward.Target{Source: "billing", Route: "crm"}
	warehouse = forward.Target{Source: "billing", Route: "warehouse"}
	ledger    = forward.Target{Source: "ledger", Route: "default"}
)

func newFixture(t *testing.T, token string) *fixture {
	t.Helper()
	st := store.New(t.TempDir())
	st.Logger = zaptest.NewLogger(t)
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := &clock{t: time.Now().UTC()}
	c := newConsole(token, sources, time.Hour, st, zaptest.NewLogger(t), clk.now)
	t.Cleanup(c.Close)
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.All("/ui/*", c.Handle)
	return &fixture{t: t, console: c, store: st, clock: clk, app: app, warehouse: &counter{took: map[string]int{}}}
}

// forwarding starts a forwarder: billing's crm and ledger go to a
// downstream that refuses everything, so that crm's entries become dead
// letters and ledger's wait for their next attempt in an hour; billing's
// warehouse goes to one that takes everything.
func (f *fixture) forwarding() {
	f.t.Helper()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	f.t.Cleanup(down.Close)
	up := httptest.NewServer(f.warehouse)
	f.t.Cleanup(up.Close)
	fw := sender.New(f.store, map[forward.Target]sender.Route{
		crm:       {URL: down.URL, Timeout: time.Second, Concurrency: 1, Policy: forward.RetryPolicy{MaxAttempts: 1, Initial: time.Millisecond, Max: time.Millisecond}},
		warehouse: {URL: up.URL, Timeout: time.Second, Concurrency: 1, Policy: forward.RetryPolicy{MaxAttempts: 1, Initial: time.Millisecond, Max: time.Millisecond}},
		ledger:    {URL: down.URL, Timeout: time.Second, Concurrency: 1, Policy: forward.RetryPolicy{MaxAttempts: 100, Initial: time.Hour, Max: time.Hour}},
	}, zaptest.NewLogger(f.t))
	fw.Metrics = f.console
	if err := fw.Open(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { fw.Close(context.Background()) })
}

// deliver decides d as the gateway would, routed to every route of its
// source, and tells the console.
func (f *fixture) deliver(source, requestID, deliveryID, resource, version string) webhookd.Outcome {
	f.t.Helper()
	var routes []string
	for _, s := range sources {
		if s.Name == source {
			for _, r := range s.Routes {
				routes = append(routes, r.Name)
			}
		}
	}
	return f.decide(webhookd.Delivery{Source: source, RequestID: requestID, DeliveryID: deliveryID, Resource: resource, Version: version,
		Fingerprint: "fp-" + requestID, ReceivedAt: time.Now(), Forward: len(routes) > 0, Routes: routes, Body: []byte(`{}`)})
}

// decide decides d, and tells the console.
func (f *fixture) decide(d webhookd.Delivery) webhookd.Outcome {
	f.t.Helper()
	if d.Version != "" {
		fmt.Sscan(d.Version, &d.VersionOrder)
	}
	out, err := f.store.Decide(context.Background(), d)
	if err != nil {
		f.t.Fatal(err)
	}
	f.console.Decided(d, out)
	return out
}

// waitTook waits for billing's warehouse downstream to have taken requestID
// n times.
func (f *fixture) waitTook(requestID string, n int) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.warehouse.count(requestID) != n {
		if time.Now().After(deadline) {
			f.t.Fatalf("warehouse took %s %d times, want %d", requestID, f.warehouse.count(requestID), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitForward waits for requestID's forward status on target to become
// state.
func (f *fixture) waitForward(target forward.Target, requestID string, state webhookd.ForwardState) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := f.store.Receipt(context.Background(), target.Source, requestID)
		if err == nil && r.Route(target.Route) != nil && r.Route(target.Route).State == state {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s/%s never became %s: %+v %v", target, requestID, state, r, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// deadLetters reads every dead letter of target, a page at a time.
func (f *fixture) deadLetters(target forward.Target) []forward.Entry {
	f.t.Helper()
	var all []forward.Entry
	page := storage.Page{}
	for {
		dead, next, err := f.store.DeadLetters(context.Background(), target, page)
		if err != nil {
			f.t.Fatal(err)
		}
		all = append(all, dead...)
		if next == "" {
			return all
		}
		page.Cursor = next
	}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (f *fixture) do(req *http.Request) answer {
	f.t.Helper()
	resp, err := f.app.Test(req, -1)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// get asks for path with the bearer token.
func (f *fixture) get(path string) answer {
	f.t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	return f.do(req)
}

// post sends a form as the console's own page would, with cookie (or the
// bearer token when it is empty) and the matching CSRF token.
func (f *fixture) post(path, cookie string, form url.Values) answer {
	f.t.Helper()
	cred := bearerCredential
	if cookie != "" {
		cred = cookie
	}
	if !form.Has(csrfField) {
		form.Set(csrfField, f.console.auth.csrf(cred))
	}
	return f.rawPost(path, cookie, form, map[string]string{"Origin": "http://example.com"})
}

func (f *fixture) rawPost(path, cookie string, form url.Values, headers map[string]string) answer {
	f.t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: cookie})
	} else {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return f.do(req)
}

// login logs in through the form and returns the session cookie's value.
func (f *fixture) login() string {
	f.t.Helper()
	a := f.rawPost("/ui/login", "", url.Values{"token": {token}, "next": {"/ui/"}}, map[string]string{"Authorization": ""})
	if a.status != http.StatusSeeOther {
		f.t.Fatalf("login: %d %s", a.status, a.body)
	}
	return sessionOf(f.t, a).Value
}

func sessionOf(t *testing.T, a answer) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	t.Fatalf("no session cookie set: %v", a.header)
	return nil
}

func contains(t *testing.T, what string, a answer, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(a.body, w) {
			t.Errorf("%s: the page does not say %q:\n%s", what, w, a.body)
		}
	}
}

func TestWithoutATokenTheConsoleRefusesLikeTheAPI(t *testing.T) {
	f := newFixture(t, "")
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/ui/", nil),
		httptest.NewRequest(http.MethodGet, "/ui/login", nil),
		httptest.NewRequest(http.MethodPost, "/ui/login", strings.NewReader("token=")),
		httptest.NewRequest(http.MethodGet, "/ui/tail/events", nil),
	} {
		req.Header.Set("Authorization", "Bearer ")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		a := f.do(req)
		if a.status != http.StatusUnauthorized || !strings.Contains(a.body, "set admin.token") || !strings.Contains(a.body, "WEBHOOKD_ADMIN_TOKEN") {
			t.Errorf("%s %s: %d %q, want 401 naming admin.token and WEBHOOKD_ADMIN_TOKEN", req.Method, req.URL.Path, a.status, a.body)
		}
	}
}

func TestWrongTokenIsRefused(t *testing.T) {
	f := newFixture(t, token)
	for _, auth := range []string{"Bearer wrong", "Bearer " + token + "x", "Basic " + token, token} {
		req := httptest.NewRequest(http.MethodGet, "/ui/", nil)
		req.Header.Set("Authorization", auth)
		if a := f.do(req); a.status != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", auth, a.status)
		}
	}
	a := f.rawPost("/ui/login", "", url.Values{"token": {"wrong"}}, map[string]string{"Authorization": ""})
	if a.status != http.StatusUnauthorized || a.header.Get("Set-Cookie") != "" {
		t.Errorf("login with a wrong token: %d, cookie %q", a.status, a.header.Get("Set-Cookie"))
	}
	contains(t, "wrong token", a, "not the admin token")
	if a := f.get("/ui/"); a.status != http.StatusOK {
		t.Errorf("the right bearer token: %d", a.status)
	}
}

func TestLoginSetsASignedSessionCookie(t *testing.T) {
	f := newFixture(t, token)
	a := f.rawPost("/ui/login", "", url.Values{"token": {token}, "next": {"/ui/receipt?source=billing"}}, map[string]string{"Authorization": ""})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/receipt?source=billing" {
		t.Fatalf("login: %d to %q", a.status, a.header.Get("Location"))
	}
	set := sessionOf(t, a)
	if !set.HttpOnly || set.SameSite != http.SameSiteStrictMode || set.Path != "/ui/" || !set.Expires.After(f.clock.now()) {
		t.Errorf("session cookie %q: want HttpOnly, SameSite=Strict, Path=/ui/ and an expiry", set.Raw)
	}
	if set.Secure {
		t.Errorf("a cookie set over plain HTTP is Secure, so the browser would never send it back: %q", set.Raw)
	}
	if strings.Contains(set.Raw, token) {
		t.Errorf("the session cookie holds the token: %q", set.Raw)
	}
	cookie := f.login()
	page := func(cookie string) answer {
		req := httptest.NewRequest(http.MethodGet, "/ui/outbox", nil)
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: cookie})
		return f.do(req)
	}
	if a := page(cookie); a.status != http.StatusOK {
		t.Errorf("a page with the session: %d", a.status)
	}
	other := newAuth("another token").session(f.clock.now().Add(time.Hour))
	exp, mac, _ := strings.Cut(cookie, ".")
	for name, bad := range map[string]string{
		"another token's":   other,
		"a longer life":     fmt.Sprint(f.clock.now().Add(48*time.Hour).Unix()) + "." + mac,
		"no signature":      exp,
		"a garbled expiry":  "x" + cookie,
		"the token, itself": token,
	} {
		if a := page(bad); a.status != http.StatusSeeOther || !strings.HasPrefix(a.header.Get("Location"), "/ui/login?next=") {
			t.Errorf("a session with %s: %d %q, want a redirect to the login page", name, a.status, a.header.Get("Location"))
		}
	}
	f.clock.add(sessionLife)
	if a := page(cookie); a.status != http.StatusSeeOther {
		t.Errorf("an expired session: %d, want a redirect to the login page", a.status)
	}
}

func TestSessionCookieIsSecureOverTLS(t *testing.T) {
	f := newFixture(t, token)
	a := f.rawPost("/ui/login", "", url.Values{"token": {token}}, map[string]string{"Authorization": "", "X-Forwarded-Proto": "https"})
	if set := sessionOf(t, a); !set.Secure {
		t.Errorf("a session set over HTTPS is not Secure: %q", set.Raw)
	}
}

func TestLoginGoesBackOnlyToTheConsole(t *testing.T) {
	f := newFixture(t, token)
	req := httptest.NewRequest(http.MethodGet, "/ui/receipt?source=billing&request_id=r%201", nil)
	a := f.do(req)
	if want := "/ui/login?next=" + url.QueryEscape("/ui/receipt?source=billing&request_id=r%201"); a.status != http.StatusSeeOther || a.header.Get("Location") != want {
		t.Errorf("a page without a session: %d to %q, want %q", a.status, a.header.Get("Location"), want)
	}
	for _, next := range []string{"//evil.example/ui/", "https://evil.example/", "/ui//evil.example", "/admin/outbox", "/ui/\r\nX: y"} {
		a := f.rawPost("/ui/login", "", url.Values{"token": {token}, "next": {next}}, map[string]string{"Authorization": ""})
		if a.header.Get("Location") != "/ui/" {
			t.Errorf("login with next=%q goes to %q, want /ui/", next, a.header.Get("Location"))
		}
	}
	if a := f.do(httptest.NewRequest(http.MethodGet, "/ui/login", nil)); a.status != http.StatusOK {
		t.Errorf("the login page: %d", a.status)
	} else {
		contains(t, "login page", a, `type="password"`, `autocomplete="current-password"`)
	}
}

func TestPostsNeedTheCSRFTokenAndTheSameOrigin(t *testing.T) {
	f := newFixture(t, token)
	f.forwarding()
	f.deliver("billing", "req-1", "", "", "")
	f.waitForward(crm, "req-1", webhookd.ForwardDead)
	cookie := f.login()
	otherSession := f.console.auth.session(f.clock.now().Add(time.Minute))
	for name, tc := range map[string]struct {
		csrf    string
		headers map[string]string
	}{
		"no CSRF token":               {"", nil},
		"a wrong CSRF token":          {"AAAA", nil},
		"another session's token":     {f.console.auth.csrf(otherSession), nil},
		"the bearer's token":          {f.console.auth.csrf(bearerCredential), nil},
		"a cross-site Sec-Fetch-Site": {f.console.auth.csrf(cookie), map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"another Origin":              {f.console.auth.csrf(cookie), map[string]string{"Origin": "http://evil.example"}},
		"a null Origin":               {f.console.auth.csrf(cookie), map[string]string{"Origin": "null"}},
	} {
		form := url.Values{"source": {"billing"}, "route": {"crm"}, "request_id": {"req-1"}, csrfField: {tc.csrf}}
		if a := f.rawPost("/ui/deadletters/retry", cookie, form, tc.headers); a.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, a.status)
		}
	}
	for path, form := range map[string]url.Values{
		"/ui/routes/pause":     {"source": {"billing"}, "route": {"crm"}},
		"/ui/deadletters/bulk": {"filter": {"billing/crm"}, "repair": {"discard"}, "confirm": {"yes"}},
	} {
		if a := f.rawPost(path, cookie, form, nil); a.status != http.StatusForbidden {
			t.Errorf("%s without the CSRF token: %d, want 403", path, a.status)
		}
	}
	if states, err := f.store.RouteStates(context.Background()); err != nil || states[crm].Paused {
		t.Fatalf("a refused POST paused a route: %+v %v", states, err)
	}
	if dead := f.deadLetters(crm); len(dead) != 1 {
		t.Fatalf("a refused POST changed the dead letters: %v", dead)
	}
	if a := f.rawPost("/ui/logout", cookie, url.Values{}, nil); a.status != http.StatusForbidden {
		t.Errorf("logout without the CSRF token: %d, want 403", a.status)
	}
	a := f.rawPost("/ui/deadletters/retry", cookie, url.Values{"source": {"billing"}, "route": {"crm"}, "request_id": {"req-1"}, csrfField: {f.console.auth.csrf(cookie)}},
		map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://example.com"})
	if a.status != http.StatusAccepted {
		t.Errorf("a POST from the console's own page: %d %s", a.status, a.body)
	}
	contains(t, "retry", a, "billing/crm/req-1 is back in the outbox")
	if a := f.rawPost("/ui/login", "", url.Values{"token": {token}}, map[string]string{"Authorization": "", "Origin": "http://evil.example"}); a.status != http.StatusForbidden {
		t.Errorf("a login posted from another site: %d, want 403", a.status)
	}
}

func TestEveryAnswerCarriesTheSecurityHeaders(t *testing.T) {
	f := newFixture(t, token)
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/ui/", nil),
		httptest.NewRequest(http.MethodGet, "/ui/login", nil),
		httptest.NewRequest(http.MethodGet, "/ui/static/console.js", nil),
		httptest.NewRequest(http.MethodGet, "/ui/nosuch", nil),
	} {
		req.Header.Set("Authorization", "Bearer "+token)
		a := f.do(req)
		if got := a.header.Get("Content-Security-Policy"); got != contentSecurityPolicy {
			t.Errorf("%s: Content-Security-Policy %q", req.URL.Path, got)
		}
		if a.header.Get("X-Content-Type-Options") != "nosniff" || a.header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", req.URL.Path, a.header)
		}
	}
	for _, directive := range strings.Split(contentSecurityPolicy, "; ") {
		if _, sources, _ := strings.Cut(directive, " "); sources != "'self'" && sources != "'none'" {
			t.Errorf("the policy allows more than the console itself: %q", directive)
		}
	}
	a := f.get("/ui/")
	if strings.Contains(a.body, "<script>") || strings.Contains(a.body, "style=") || strings.Contains(a.body, "http://") || strings.Contains(a.body, "https://") {
		t.Errorf("the page has inline script or style, or names another site:\n%s", a.body)
	}
	js := f.get(f.console.assetURL("console.js"))
	if js.status != http.StatusOK || !strings.HasPrefix(js.header.Get("Content-Type"), "text/javascript") || !strings.Contains(js.header.Get("Cache-Control"), "immutable") {
		t.Errorf("console.js: %d %v", js.status, js.header)
	}
}

func TestEmptyPagesSayWhatToDo(t *testing.T) {
	f := newFixture(t, token)
	for path, wants := range map[string][]string{
		"/ui/":            {"No deliveries in the last 15 minutes", "ready", "records only"},
		"/ui/tail":        {"Nothing yet", `data-stream="/ui/tail/events?source=&amp;decision=&amp;after=0"`},
		"/ui/receipt":     {"type its request ID"},
		"/ui/receipts":    {"No receipts yet", `<option value="">every source</option>`},
		"/ui/resource":    {"type the resource"},
		"/ui/deadletters": {"No dead letters", "max_attempts"},
		"/ui/outbox":      {"The outbox is empty"},
	} {
		a := f.get(path)
		if a.status != http.StatusOK {
			t.Errorf("%s: %d", path, a.status)
		}
		contains(t, path, a, wants...)
	}
	contains(t, "a missing receipt", f.get("/ui/receipt?source=billing&request_id=nope"), "No receipt for request ID nope", "receipt_ttl")
	contains(t, "a missing resource", f.get("/ui/resource?source=billing&resource=nope"), "No accepted version of resource nope")

	none := newConsole(token, []Source{{Name: "audit"}}, time.Hour, f.store, zaptest.NewLogger(t), time.Now)
	app := fiber.New()
	app.All("/ui/*", none.Handle)
	req := httptest.NewRequest(http.MethodGet, "/ui/deadletters", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "No source forwards") {
		t.Errorf("dead letters with no forwarding source:\n%s", b)
	}
}

func TestPagesShowTheRecords(t *testing.T) {
	f := newFixture(t, token)
	f.forwarding()
	f.deliver("billing", "req-1", "dlv-1", "sub_1", "5")
	f.waitForward(crm, "req-1", webhookd.ForwardDead) // its attempt counted in this minute
	f.waitForward(warehouse, "req-1", webhookd.ForwardDelivered)
	f.clock.add(time.Minute)
	f.deliver("billing", "req-1", "dlv-2", "sub_1", "5")
	f.deliver("billing", "req-0", "dlv-3", "sub_1", "4")
	f.deliver("ledger", "led-1", "", "acct_1", "1")
	f.console.Rejected("billing", webhookd.Delivery{}, "signature", "signature mismatch")
	f.waitForward(ledger, "led-1", webhookd.ForwardRetrying)

	receipt := f.get("/ui/receipt?source=billing&request_id=req-1")
	contains(t, "receipt", receipt, "billing / <span class=\"mono\">req-1</span>", "dlv-1", "dlv-2",
		`<span class="badge duplicate">duplicate</span>`, `href="/ui/resource?source=billing&amp;resource=sub_1"`,
		"<span class=\"mono\">5</span> against latest <span class=\"mono\">none</span>")
	crmRow, warehouseRow := row(t, receipt, "route-crm"), row(t, receipt, "route-warehouse")
	for _, want := range []string{`<span class="badge dead">dead</span>`, "503 Service Unavailable", "down for maintenance",
		"it is a dead letter", `<a href="/ui/deadletters?filter=billing%2fcrm">`} {
		if !strings.Contains(crmRow, want) {
			t.Errorf("the receipt's crm route does not say %q:\n%s", want, crmRow)
		}
	}
	for _, want := range []string{`<span class="badge delivered">delivered</span>`, "200 OK", `<time datetime=`,
		`name="route" value="warehouse"`, `aria-label="Redeliver to warehouse"`} {
		if !strings.Contains(warehouseRow, want) {
			t.Errorf("the receipt's warehouse route does not say %q:\n%s", want, warehouseRow)
		}
	}
	if strings.Contains(crmRow, `action="/ui/receipt/redeliver"`) {
		t.Error("a dead letter's route offers a redelivery")
	}
	if strings.Contains(receipt.body, "Redeliver to all") {
		t.Error("the receipt offers a redelivery to all when one route alone can take it")
	}
	contains(t, "receipt's risks", receipt, "route crm: forwarding gave up (a dead letter)", "route warehouse: forwarding is at least once")

	stale := f.get("/ui/receipt?source=billing&request_id=req-0")
	contains(t, "stale receipt", stale, `<span class="badge stale">stale</span>`, "against latest <span class=\"mono\">5</span>",
		"No redelivery: request was decided stale, not accepted", "set by <a href=\"/ui/receipt?source=billing&amp;request_id=req-1\"")
	contains(t, "resource", f.get("/ui/resource?source=billing&resource=sub_1"), `<dd class="mono">5</dd>`, "request_id=req-1")
	dead := f.get("/ui/deadletters")
	contains(t, "dead letters", dead, `<h2 id="g-billing">billing`, `<td data-label="Route" class="mono">crm</td>`, "req-1",
		"503 Service Unavailable", `name="route" value="crm"`, `aria-label="Retry req-1 to crm"`, `aria-label="Discard req-1 to crm"`)
	if strings.Contains(dead.body, "led-1") || strings.Contains(dead.body, ">warehouse</td>") {
		t.Error("a retrying or delivered entry is listed as a dead letter")
	}
	contains(t, "dead letters of a route that has none", f.get("/ui/deadletters?filter=billing/warehouse"),
		"No dead letters for billing/warehouse", `<option value="billing/warehouse" selected>billing / warehouse</option>`)
	for _, filter := range []string{"ledger", "ledger/default"} {
		outbox := f.get("/ui/outbox?filter=" + url.QueryEscape(filter))
		contains(t, "outbox of "+filter, outbox, "led-1", `<td data-label="Route" class="mono">default</td>`, "Next attempt", "503 Service Unavailable",
			`<option value="`+filter+`" selected>`)
		if strings.Contains(outbox.body, "req-1") {
			t.Errorf("the outbox filtered to %s shows billing's entries", filter)
		}
	}
	if outbox := f.get("/ui/outbox?filter=billing"); strings.Contains(outbox.body, "led-1") || !strings.Contains(outbox.body, "The outbox is empty for billing") {
		t.Errorf("the outbox filtered to billing:\n%s", outbox.body)
	}
	overview := f.get("/ui/")
	contains(t, "overview", overview,
		"accepted per minute, the last 15 minutes: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0",
		"duplicate per minute, the last 15 minutes: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1",
		"stale per minute, the last 15 minutes: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1",
		`<span class="reason">signature</span> 1`,
		"forwards to 2 routes",
		`<a href="/ui/deadletters?filter=billing%2fcrm" class="alert">1</a>`,
		`<a href="/ui/outbox?filter=billing%2fcrm">0 pending</a>`,
		`<a href="/ui/deadletters?filter=billing%2fwarehouse">0</a>`,
		`<a href="/ui/outbox?filter=ledger%2fdefault">1 pending</a>`)
	for _, want := range []string{
		"dead per minute, the last 15 minutes: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0",
		"delivered per minute, the last 15 minutes: 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0",
	} {
		if !strings.Contains(overview.body, want) {
			t.Errorf("the overview does not count billing's attempts: %q\n%s", want, overview.body)
		}
	}
	f.clock.add(historyMinutes * time.Minute)
	contains(t, "overview a quarter hour later", f.get("/ui/"), "No deliveries in the last 15 minutes")
}

// row returns the table row of a page with id.
func row(t *testing.T, a answer, id string) string {
	t.Helper()
	_, rest, ok := strings.Cut(a.body, `<tr id="`+id+`">`)
	if !ok {
		t.Fatalf("the page has no row %s:\n%s", id, a.body)
	}
	r, _, _ := strings.Cut(rest, "</tr>")
	return r
}

// A delivery of a forwarding source that matched no route's filter is
// accepted and routed nowhere, and its receipt says so.
func TestTheReceiptOfAnUnroutedDelivery(t *testing.T) {
	f := newFixture(t, token)
	f.decide(webhookd.Delivery{Source: "billing", RequestID: "req-none", Fingerprint: "fp", ReceivedAt: time.Now(), Forward: true, Body: []byte(`{}`)})
	a := f.get("/ui/receipt?source=billing&request_id=req-none")
	contains(t, "unrouted receipt", a, `<span class="badge accepted">accepted</span>`, "Routed nowhere", "matched no route&#39;s filter",
		"No redelivery: the request was not forwarded to any route")
	if strings.Contains(a.body, `action="/ui/receipt/redeliver"`) || strings.Contains(a.body, `<table class="rows routes">`) {
		t.Errorf("an unrouted receipt shows routes or offers a redelivery:\n%s", a.body)
	}
	f.deliver("audit", "aud-1", "", "", "")
	audit := f.get("/ui/receipt?source=audit&request_id=aud-1")
	contains(t, "a records-only source's receipt", audit, "No redelivery: the request was not forwarded to any route", "the source has no routes")
	if strings.Contains(audit.body, "Routed nowhere") {
		t.Error("the receipt of a source without routes says it was routed nowhere")
	}
}

func TestRepairsAnswerInPlace(t *testing.T) {
	f := newFixture(t, token)
	f.forwarding()
	f.deliver("billing", "req-1", "", "", "")
	f.deliver("billing", "req-2", "", "", "")
	f.deliver("audit", "aud-1", "", "", "")
	for _, id := range []string{"req-1", "req-2"} {
		f.waitForward(crm, id, webhookd.ForwardDead)
		f.waitForward(warehouse, id, webhookd.ForwardDelivered)
	}

	one := func(id, route string) url.Values {
		return url.Values{"source": {"billing"}, "route": {route}, "request_id": {id}}
	}
	ask := f.post("/ui/deadletters/discard", "", one("req-2", "crm"))
	contains(t, "discard", ask, `role="alertdialog"`, "Discard billing / crm / <span class=\"mono\">req-2</span>?", `name="confirm" value="yes"`,
		`name="route" value="crm"`, "Removes this dead letter: nothing more is sent.",
		"Its receipt stays, marked discarded on route crm, and Redeliver to crm on the receipt can send the request again")
	if dead := f.deadLetters(crm); len(dead) != 2 {
		t.Fatalf("a discard discarded before it was confirmed: %d dead letters left", len(dead))
	}
	if strings.Contains(ask.body, "cannot be undone") || strings.Contains(ask.body, "payload is dropped") {
		t.Errorf("the confirmation says the payload is dropped, yet redelivery sends it:\n%s", ask.body)
	}
	confirm := one("req-2", "crm")
	confirm.Set("confirm", "yes")
	contains(t, "confirmed discard", f.post("/ui/deadletters/discard", "", confirm), "billing/crm/req-2 is discarded")
	f.waitForward(crm, "req-2", webhookd.ForwardDiscarded)
	gone := f.post("/ui/deadletters/discard", "", confirm)
	if gone.status != http.StatusNotFound {
		t.Errorf("discard of a dead letter that is gone: %d", gone.status)
	}
	contains(t, "discard again", gone, "Not discarded: no dead letter for billing/crm/req-2")
	for _, form := range []url.Values{one("req-2", "crm"), one("req-1", ""), one("req-1", "warehouse")} {
		if a := f.post("/ui/deadletters/discard", "", form); a.status/100 != 4 || strings.Contains(a.body, "alertdialog") {
			t.Errorf("asked to confirm the discard of no dead letter (%v): %d", form, a.status)
		}
	}
	if dead := f.deadLetters(crm); len(dead) != 1 {
		t.Errorf("%d dead letters of crm left, want req-1's", len(dead))
	}

	// What the confirmation says: the receipt stays, and redelivery from it
	// sends the request again, to one route or to every route whose
	// forwarding ended.
	receipt := f.get("/ui/receipt?source=billing&request_id=req-2")
	for id, wants := range map[string][]string{
		"route-crm":       {`<span class="badge discarded">discarded</span>`, `aria-label="Redeliver to crm"`},
		"route-warehouse": {`<span class="badge delivered">delivered</span>`, `aria-label="Redeliver to warehouse"`},
	} {
		r := row(t, receipt, id)
		for _, want := range wants {
			if !strings.Contains(r, want) {
				t.Errorf("the discarded receipt's %s does not say %q:\n%s", id, want, r)
			}
		}
	}
	contains(t, "discarded receipt", receipt, "Redeliver to all", `Sends the payload again to <span class="mono">crm</span>, <span class="mono">warehouse</span>`)
	all := f.post("/ui/receipt/redeliver", "", url.Values{"source": {"billing"}, "request_id": {"req-2"}})
	if all.status != http.StatusAccepted {
		t.Errorf("redeliver to all after discard: %d", all.status)
	}
	contains(t, "redeliver to all", all, "Queued for forwarding again to each route whose forwarding had ended")
	f.waitTook("req-2", 2)
	f.waitForward(crm, "req-2", webhookd.ForwardDead)
	f.waitForward(warehouse, "req-2", webhookd.ForwardDelivered)
	again := f.post("/ui/receipt/redeliver", "", one("req-2", "warehouse"))
	if again.status != http.StatusAccepted {
		t.Errorf("redeliver to warehouse: %d", again.status)
	}
	contains(t, "redeliver to warehouse", again, "Queued for forwarding again to route warehouse")
	f.waitTook("req-2", 3)
	f.waitForward(warehouse, "req-2", webhookd.ForwardDelivered)
	if r, _ := f.store.Receipt(context.Background(), "billing", "req-2"); r.Route("crm").State != webhookd.ForwardDead {
		t.Errorf("a redelivery to warehouse changed crm: %+v", r.Route("crm"))
	}

	for _, tc := range []struct {
		source, id, route string
		status            int
		says              string
	}{
		{"billing", "req-1", "crm", http.StatusConflict, "Not redelivered: request is a dead letter of route crm"},
		{"billing", "req-1", "nosuch", http.StatusNotFound, "Not redelivered: request was not forwarded to route"},
		{"audit", "aud-1", "", http.StatusConflict, "Not redelivered: the request was not forwarded to any route"},
		{"billing", "nope", "", http.StatusNotFound, "Not redelivered: no receipt for billing/nope"},
	} {
		a := f.post("/ui/receipt/redeliver", "", url.Values{"source": {tc.source}, "request_id": {tc.id}, "route": {tc.route}})
		if a.status != tc.status {
			t.Errorf("redeliver %s/%s to %q: %d, want %d", tc.source, tc.id, tc.route, a.status, tc.status)
		}
		contains(t, "redeliver "+tc.id+" to "+tc.route, a, tc.says)
	}
	retried := f.post("/ui/deadletters/retry", "", one("req-1", "crm"))
	if retried.status != http.StatusAccepted {
		t.Errorf("retry: %d", retried.status)
	}
	contains(t, "retry", retried, "billing/crm/req-1 is back in the outbox")
	if a := f.post("/ui/deadletters/retry", "", one("req-1", "warehouse")); a.status != http.StatusNotFound {
		t.Errorf("retry of a dead letter on a route that has none: %d, want 404", a.status)
	}
}

func TestRecordsAreEscaped(t *testing.T) {
	f := newFixture(t, token)
	id := `<script>alert(1)</script>"'&`
	f.deliver("audit", id, `<b>d</b>`, "", "")
	for _, path := range []string{"/ui/receipt?source=audit&request_id=" + url.QueryEscape(id), "/ui/tail"} {
		a := f.get(path)
		if strings.Contains(a.body, "<script>alert") || strings.Contains(a.body, "<b>d</b>") {
			t.Errorf("%s puts a request's text into the page as HTML:\n%s", path, a.body)
		}
		contains(t, path, a, "&lt;script&gt;alert(1)&lt;/script&gt;")
	}
}

func TestAgo(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "just now"}, {9 * time.Second, "just now"}, {42 * time.Second, "42 s ago"}, {3 * time.Minute, "3 min ago"},
		{5 * time.Hour, "5 h ago"}, {72 * time.Hour, "3 days ago"}, {-90 * time.Second, "in 1 min"},
	} {
		if got := ago(now, now.Add(-tc.d)); got != tc.want {
			t.Errorf("ago(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 5 << 30: "5.0 GiB"} {
		if got := size(n); got != want {
			t.Errorf("size(%d) = %q, want %q", n, got, want)
		}
	}
}

// The receipt page offers Redeliver to a route only where the redelivery
// rules (forward.CanRedeliver, forward.CanResend) take it, and to all
// where forward.Redeliverable allows more than one route.
func TestRedeliverIsOfferedOnlyWhereTheRulesAllowIt(t *testing.T) {
	receipt := func(d webhookd.Decision, states ...webhookd.ForwardState) *dedupe.Receipt {
		r := &dedupe.Receipt{Source: "billing", RequestID: "req-2", Resource: "sub_1", Version: "2", Decision: d}
		for i, s := range states {
			r.Routes = append(r.Routes, webhookd.RouteStatus{Route: []string{"crm", "warehouse"}[i], ForwardStatus: webhookd.ForwardStatus{State: s}})
		}
		return r
	}
	self := &versioning.Latest{RequestID: "req-2", Version: "2"}
	newer := &versioning.Latest{RequestID: "req-3", Version: "3"}
	for _, tc := range []struct {
		name    string
		r       *dedupe.Receipt
		latest  *versioning.Latest
		ok      bool
		says    string
		deadTip bool
	}{
		{"delivered", receipt(webhookd.Accepted, webhookd.ForwardDelivered), self, true, "", false},
		{"discarded", receipt(webhookd.Accepted, webhookd.ForwardDiscarded), self, true, "", false},
		{"superseded", receipt(webhookd.Accepted, webhookd.ForwardSuperseded), newer, false, "was accepted after this request's version 2", false},
		{"delivered, a newer version since", receipt(webhookd.Accepted, webhookd.ForwardDelivered), newer, false, "version 3 of resource sub_1 was accepted after", false},
		{"stale", receipt(webhookd.Stale), newer, false, "decided stale, not accepted", false},
		{"accepted, not forwarded to crm", receipt(webhookd.Accepted), self, false, `was not forwarded to route "crm"`, false},
		{"pending", receipt(webhookd.Accepted, webhookd.ForwardPending), self, false, "already queued for route crm (pending)", false},
		{"retrying", receipt(webhookd.Accepted, webhookd.ForwardRetrying), self, false, "already queued for route crm (retrying)", false},
		{"dead", receipt(webhookd.Accepted, webhookd.ForwardDead), self, false, "it is a dead letter", true},
		{"dead on another route", receipt(webhookd.Accepted, webhookd.ForwardDelivered, webhookd.ForwardDead), self, true, "", false},
	} {
		ok, says, deadTip := redeliverable(tc.r, "crm", tc.latest)
		if ok != tc.ok || !strings.Contains(says, tc.says) || deadTip != tc.deadTip {
			t.Errorf("%s: %v %q %v, want %v %q %v", tc.name, ok, says, deadTip, tc.ok, tc.says, tc.deadTip)
		}
	}
	for _, tc := range []struct {
		name   string
		r      *dedupe.Receipt
		latest *versioning.Latest
		routes []string
		says   string
	}{
		{"both ended", receipt(webhookd.Accepted, webhookd.ForwardDelivered, webhookd.ForwardDiscarded), self, []string{"crm", "warehouse"}, ""},
		{"one pending", receipt(webhookd.Accepted, webhookd.ForwardPending, webhookd.ForwardDelivered), self, []string{"warehouse"}, ""},
		{"both ended, a newer version since", receipt(webhookd.Accepted, webhookd.ForwardDelivered, webhookd.ForwardDelivered), newer, nil, "version 3 of resource sub_1"},
		{"none ended", receipt(webhookd.Accepted, webhookd.ForwardDead, webhookd.ForwardRetrying), self, nil, "dead letter of route crm"},
		{"no routes", receipt(webhookd.Accepted), self, nil, "not forwarded to any route"},
	} {
		routes, err := redeliverableAll(tc.r, tc.latest)
		if !slices.Equal(routes, tc.routes) || (err == nil) != (tc.says == "") || err != nil && !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: to all %v %v, want %v %q", tc.name, routes, err, tc.routes, tc.says)
		}
	}
}

func TestTheDiscardConfirmationSaysWhatStays(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	accepted := now.Add(-2 * time.Hour)
	dead := forward.Entry{Source: "billing", Route: "crm", RequestID: "req-1", Resource: "sub_1", Version: "2", CreatedAt: accepted}
	own := &dedupe.Receipt{Source: "billing", RequestID: "req-1", Decision: webhookd.Accepted, FirstSeen: accepted,
		Routes: []webhookd.RouteStatus{{Route: "crm", ForwardStatus: webhookd.ForwardStatus{State: webhookd.ForwardDead}}}}
	later := &dedupe.Receipt{Source: "billing", RequestID: "req-1", Decision: webhookd.Accepted, FirstSeen: now.Add(-time.Minute),
		Routes: []webhookd.RouteStatus{{Route: "crm", ForwardStatus: webhookd.ForwardStatus{State: webhookd.ForwardPending}}}}
	lost := dead
	lost.BodyLost = true
	for _, tc := range []struct {
		name   string
		e      forward.Entry
		held   *dedupe.Receipt
		latest *versioning.Latest
		ttl    time.Duration
		says   string
	}{
		{"redeliverable", dead, own, &versioning.Latest{RequestID: "req-1", Version: "2"}, 24 * time.Hour,
			"Its receipt stays, marked discarded on route crm, and Redeliver to crm on the receipt can send the request again until its payload expires, not before 2026-12-03 10:00:00 UTC"},
		{"no resource", forward.Entry{Source: "billing", Route: "crm", RequestID: "req-1", CreatedAt: accepted}, own, nil, 24 * time.Hour,
			"not before 2026-12-03 10:00:00 UTC"},
		{"accepted longer ago than receipt_ttl", dead, own, nil, time.Hour, "while its payload is held: receipt_ttl after it was last queued"},
		{"its receipt expired", dead, nil, nil, 24 * time.Hour, "Its receipt has expired, so nothing can send this request again"},
		{"its request ID came back", dead, later, nil, 24 * time.Hour, "came back since as a new request"},
		{"its payload expired", lost, own, nil, 24 * time.Hour, "Its payload expired before it was forwarded"},
		{"a newer version since", dead, own, &versioning.Latest{RequestID: "req-9", Version: "3"}, 24 * time.Hour, "It cannot be sent again: version 3 of resource sub_1"},
	} {
		got := afterDiscard(&tc.e, tc.held, tc.latest, tc.ttl, now)
		if !strings.HasPrefix(got, "Removes this dead letter: nothing more is sent. ") || !strings.Contains(got, tc.says) {
			t.Errorf("%s: %q, want it to say %q", tc.name, got, tc.says)
		}
	}
}

// The queue pages' filter offers every source that forwards and each of
// its routes, and keeps a filter naming a route no longer configured.
func TestTheQueueFilterNamesSourcesAndRoutes(t *testing.T) {
	for filter, want := range map[string]forward.Target{"": {}, "billing": {Source: "billing"}, "billing/crm": crm} {
		if got := parseTarget(filter); got != want {
			t.Errorf("parseTarget(%q) = %v, want %v", filter, got, want)
		}
	}
	offers := func(ts targetSelect) []string {
		var got []string
		for _, g := range ts.Groups {
			for _, o := range g.Options {
				got = append(got, fmt.Sprintf("%s|%s=%s %v", g.Label, o.Label, o.Value, o.Selected))
			}
		}
		return got
	}
	want := []string{
		"billing|billing: every route=billing false", "billing|billing / crm=billing/crm true", "billing|billing / warehouse=billing/warehouse false",
		"ledger|ledger: every route=ledger false", "ledger|ledger / default=ledger/default false",
	}
	if got := offers(targets(sources, "q", "billing/crm", false)); !slices.Equal(got, want) {
		t.Errorf("the queues' filter offers %q, want %q", got, want)
	}
	// The receipts' filter offers the sources that only record too.
	if got := offers(targets(sources, "q", "billing/crm", true)); !slices.Equal(got, append(want, "|audit=audit false")) {
		t.Errorf("the receipts' filter offers %q, want %q and audit", got, want)
	}
	gone := targets(sources, "q", "billing/old", false)
	last := gone.Groups[len(gone.Groups)-1]
	if last.Label != "not configured" || len(last.Options) != 1 || last.Options[0] != (targetOption{Value: "billing/old", Label: "billing / old", Selected: true}) {
		t.Errorf("a filter naming a route no longer configured: %+v", last)
	}
}

func TestTheOverviewSummarisesEachRoute(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	facts := routeFacts{
		pending: map[forward.Target]int{crm: 3, {Source: "billing", Route: "old"}: 1, ledger: 2},
		dead:    map[forward.Target]int{warehouse: 4, {Source: "billing", Route: "older"}: 5},
		states: map[forward.Target]forward.RouteState{
			crm:       {Paused: true, Circuit: forward.Open, OpenUntil: now.Add(time.Minute)},
			warehouse: {Circuit: forward.Open, OpenUntil: now.Add(-time.Second)},
			ledger:    {Circuit: forward.HalfOpen},
		},
	}
	got := facts.of(sources[0], now)
	want := []routeSummary{
		{Route: "crm", Filter: "billing/crm", Outbox: 3, Rate: "50/s, burst 10", State: &routeState{Paused: true, Circuit: forward.Open, OpenUntil: now.Add(time.Minute)}},
		{Route: "warehouse", Filter: "billing/warehouse", Dead: 4, Rate: "no rate limit", State: &routeState{Circuit: forward.Open, OpenUntil: now.Add(-time.Second), CooledDown: true}},
		{Route: "old", Filter: "billing/old", Outbox: 1, Gone: true},
		{Route: "older", Filter: "billing/older", Dead: 5, Gone: true},
	}
	if len(got) != len(want) {
		t.Fatalf("billing's routes: %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Route != w.Route || g.Filter != w.Filter || g.Outbox != w.Outbox || g.Dead != w.Dead || g.Gone != w.Gone || g.Rate != w.Rate ||
			(g.State == nil) != (w.State == nil) || g.State != nil && *g.State != *w.State {
			t.Errorf("billing's route %d: %+v %+v, want %+v %+v", i, g, g.State, w, w.State)
		}
	}
	led := facts.of(sources[1], now)
	if len(led) != 1 || led[0].Rate != "30/m" || *led[0].State != (routeState{Circuit: forward.HalfOpen}) {
		t.Errorf("ledger's route: %+v", led)
	}
	for _, r := range (routeFacts{}).of(sources[1], now) {
		if r.Outbox != -1 || r.Dead != -1 || r.State != nil {
			t.Errorf("what was not read is shown as %d, %d and %+v", r.Outbox, r.Dead, r.State)
		}
	}
	if r := (routeFacts{states: map[forward.Target]forward.RouteState{}}).of(sources[1], now); *r[0].State != (routeState{Circuit: forward.Closed}) {
		t.Errorf("a route without a stored state is %+v, want closed", r[0].State)
	}
	if r := facts.of(sources[2], now); len(r) != 0 {
		t.Errorf("a source without routes has routes %+v", r)
	}
}

func TestTheTailLinksOnlyDecisionsToReceipts(t *testing.T) {
	f := newFixture(t, token)
	f.deliver("audit", "aud-1", "dlv-1", "", "")
	f.console.Rejected("audit", webhookd.Delivery{Source: "audit", RequestID: "aud-refused"}, "timeout", "the store did not answer in time")
	tail := f.get("/ui/tail")
	contains(t, "tail", tail, `href="/ui/receipt?source=audit&amp;request_id=aud-1"`, `<td data-label="Request ID">aud-refused</td>`)
	if strings.Contains(tail.body, "request_id=aud-refused") {
		t.Errorf("the tail links a refused request to a receipt it has not got:\n%s", tail.body)
	}
}

// usage is a Disk that reports what a test sets.
type usage Usage

func (u usage) Usage(context.Context) (Usage, error) { return Usage(u), nil }

func TestOverviewShowsTheDiskTheStoreTakes(t *testing.T) {
	f := newFixture(t, token)
	contains(t, "no disk reported", f.get("/ui/"), "not reported by this storage backend")

	f.console.Disk = usage{Size: 60 << 10, Of: "in data_dir", Space: &Space{Free: 5 << 30, Ballast: 128 << 20, Reserve: 522 << 20}}
	local := f.get("/ui/")
	contains(t, "a local disk", local, "60.0 KiB <span class=\"hint\">in data_dir</span>", "5.0 GiB", "<dt>Ballast</dt><dd>128.0 MiB", "<dt>Reserve</dt><dd>522.0 MiB")
	if strings.Contains(local.body, "below the reserve") {
		t.Error("the overview says the disk is low when it is not")
	}
	f.console.Disk = usage{Size: 60 << 10, Of: "in data_dir", Space: &Space{Free: 1 << 20, Reserve: 522 << 20, Low: true}}
	contains(t, "a low disk", f.get("/ui/"), "below the reserve", "new decisions are refused until there is more")

	f.console.Disk = usage{Size: 2 << 20, Of: "webhookd's tables and indexes"}
	db := f.get("/ui/")
	contains(t, "a database", db, "2.0 MiB <span class=\"hint\">webhookd&#39;s tables and indexes</span>", "the database server's to watch")
	if strings.Contains(db.body, "<dt>Ballast</dt>") || strings.Contains(db.body, "<dt>Reserve</dt>") {
		t.Error("the overview shows a local disk's ballast or reserve for a database")
	}
}
