package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/webhookd/webhookd/postgres/pgtest"
)

// chromium finds a Chromium to drive: $WEBHOOKD_CHROMIUM, or one on PATH.
func chromium(t *testing.T) string {
	if p := os.Getenv("WEBHOOKD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "no Chromium found: install Debian's chromium (apt-get install chromium), or set WEBHOOKD_CHROMIUM, to run the console's browser tests"
	if os.Getenv("CI") != "" {
		t.Fatal(why + " (CI installs it: this run must not skip them)")
	}
	t.Skip(why)
	return ""
}

// screenshots is where the browser tests leave a PNG of each page:
// $WEBHOOKD_SCREENSHOTS/<test>, or a directory of the test's own.
func screenshots(t *testing.T) string {
	dir := t.TempDir()
	if root := os.Getenv("WEBHOOKD_SCREENSHOTS"); root != "" {
		dir = filepath.Join(root, filepath.FromSlash(t.Name()))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots of the console's pages: %s", dir)
	return dir
}

// browser starts a headless Chromium with a fresh profile; the test's end
// stops it.
func browser(t *testing.T) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))

	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc() // kills the browser and waits for it
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// switchable is a downstream that refuses every request until it is told
// to take them, and counts what it took per route (Webhook-Route) and
// Idempotency-Key.
type switchable struct {
	up   atomic.Bool
	mu   sync.Mutex
	took map[string]int
}

func newSwitchable(up bool) *switchable {
	s := &switchable{took: map[string]int{}}
	s.up.Store(up)
	return s
}

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.up.Load() {
		http.Error(w, "downstream is down", http.StatusServiceUnavailable)
		return
	}
	s.mu.Lock()
	s.took[r.Header.Get("Webhook-Route")+"/"+r.Header.Get("Idempotency-Key")]++
	s.mu.Unlock()
}

// count is how many requests of route with key the downstream took.
func (s *switchable) count(route, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.took[route+"/"+key]
}

// consoleConfig routes billing by event type: invoices and crm go to down,
// each with one attempt and no breaker, so that a refusal makes a dead
// letter at once; analytics, which takes everything but pings, goes to
// up, under a rate limit. storage is the YAML line that picks the
// backend.
func consoleConfig(storage, down, up string) string {
	return fmt.Sprintf(`
listen: "127.0.0.1:0"
%s
shutdown_timeout: 5s
log: { level: warn }
admin: { listen: "127.0.0.1:0", token: %q }
sources:
  - name: billing
    request_id: json:request_id
    delivery_id: header:X-Delivery-Id
    resource: json:object.id
    version: json:object.version
    routes:
      - name: invoices
        url: %q
        filter: 'body.type.startsWith("invoice.")'
        max_attempts: 1
        backoff: { initial: 10ms, max: 10ms }
        breaker: { off: true }
      - name: crm
        url: %q
        filter: 'body.type.startsWith("customer.")'
        max_attempts: 1
        backoff: { initial: 10ms, max: 10ms }
        breaker: { off: true }
      - name: analytics
        url: %q
        filter: 'body.type != "ping"'
        max_attempts: 1
        backoff: { initial: 10ms, max: 10ms }
        breaker: { off: true }
        rate: 50/s
  - name: audit
    request_id: header:Idempotency-Key
`, storage, adminToken, down, down, up)
}

// billingEvent is a billing delivery of one event type.
func billingEvent(requestID, typ, object string) string {
	return fmt.Sprintf(`{"request_id":%q,"type":%q,"object":{"id":%q,"version":1}}`, requestID, typ, object)
}

// The console reads through the storage contract: the same session in the
// browser passes on either backend.
func TestConsoleInABrowser(t *testing.T) {
	t.Run("badger", func(t *testing.T) {
		consoleInABrowser(t, fmt.Sprintf("data_dir: %q", t.TempDir()))
	})
	t.Run("postgres", func(t *testing.T) {
		consoleInABrowser(t, fmt.Sprintf("storage: { backend: postgres, dsn: %q }", pgtest.SchemaDSN(t, t.Name())))
	})
}

func consoleInABrowser(t *testing.T, storage string) {
	ctx := browser(t)
	shots := screenshots(t)
	down, up := newSwitchable(false), newSwitchable(true)
	downSrv, upSrv := httptest.NewServer(down), httptest.NewServer(up)
	defer downSrv.Close()
	defer upSrv.Close()
	m, c := startMain(t, consoleConfig(storage, downSrv.URL, upSrv.URL))
	defer m.Close(context.Background())
	ui := "http://" + c.admin

	// The pages break no rule of their own Content-Security-Policy and throw
	// nothing: the browser reports either on its console.
	var problems []string
	var mu sync.Mutex
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				mu.Lock()
				problems = append(problems, m.URL+": "+m.Text)
				mu.Unlock()
			}
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		// The refusals the test asks for are logged as failed loads: the
		// wrong token's login and the POST without the CSRF token.
		for _, p := range problems {
			if !strings.HasSuffix(p, "/ui/login: Failed to load resource: the server responded with a status of 401 (Unauthorized)") &&
				!strings.HasSuffix(p, "/ui/deadletters/retry: Failed to load resource: the server responded with a status of 403 (Forbidden)") {
				t.Errorf("the browser's console: %s", p)
			}
		}
	}()

	deliver := func(requestID, deliveryID, typ, resource string) {
		t.Helper()
		status, body := c.send(http.MethodPost, "http://"+c.public+"/hooks/billing", billingEvent(requestID, typ, resource),
			map[string]string{"X-Delivery-Id": deliveryID})
		if status >= 300 {
			t.Fatalf("deliver %s: %d %v", requestID, status, body)
		}
	}
	// state is the forward state of requestID's route as the admin API
	// reads it, "" when the request was not forwarded to it.
	state := func(requestID, route string) string {
		t.Helper()
		_, r := c.adminCall(http.MethodGet, "/admin/receipts/billing/"+requestID)
		routes, _ := r["routes"].([]any)
		for _, rs := range routes {
			if rs, _ := rs.(map[string]any); rs["route"] == route {
				s, _ := rs["state"].(string)
				return s
			}
		}
		return ""
	}
	becomes := func(requestID, route, want string) {
		t.Helper()
		waitFor(t, requestID+" "+want+" on "+route, func() bool { return state(requestID, route) == want })
	}
	// While the invoices and crm downstream is down, two invoice events
	// become dead letters of invoices, one arriving twice, and a customer
	// event one of crm; analytics takes all three. A ping is routed
	// nowhere.
	deliver("req_a", "dlv_1", "invoice.paid", "sub_1")
	deliver("req_a", "dlv_2", "invoice.paid", "sub_1")
	deliver("req_b", "dlv_3", "invoice.created", "sub_2")
	deliver("req_cus", "dlv_4", "customer.updated", "cus_1")
	deliver("req_ping", "dlv_5", "ping", "ping_1")
	for _, id := range []string{"req_a", "req_b"} {
		becomes(id, "invoices", "dead")
		becomes(id, "analytics", "delivered")
	}
	becomes("req_cus", "crm", "dead")
	becomes("req_cus", "analytics", "delivered")
	c.post("nosuch", `{}`) // a refusal, for the overview's counts

	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tab *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tab)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		})
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return s
	}
	// rows reads the rows of the tables sel selects, each as its cells'
	// texts joined by "|".
	rows := func(sel string) []string {
		t.Helper()
		out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](fmt.Sprintf(
			`[...document.querySelectorAll(%q)].map(tr => [...tr.cells].map(c => c.textContent.trim().replace(/\s+/g, " ")).join("|"))`, sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return out
	}

	// The admin listener's root leads to the login page, which takes the token.
	do("log in",
		chromedp.Navigate(ui+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		shot("login"),
		chromedp.SendKeys(chromedp.ID("token"), "wrong"),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(".notice.bad")),
	)
	if got := text(".notice"); !strings.Contains(got, "not the admin token") {
		t.Errorf("a wrong token says %q", got)
	}
	do("log in with the token",
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("src-billing")),
		shot("overview"),
	)
	// The billing card shows each route's rate, state, backlog and dead
	// letters.
	queues := rows("#src-billing ~ table.queues tbody tr")
	if want := []string{"invoices no rate limit closed|0 pending|2|Pause", "crm no rate limit closed|0 pending|1|Pause",
		"analytics 50/s, burst 5 closed|0 pending|0|Pause"}; !slices.Equal(queues, want) {
		t.Errorf("overview's billing routes: %q, want %q", queues, want)
	}
	if got := text("#src-billing"); !strings.Contains(got, "forwards to 3 routes") {
		t.Errorf("overview's billing card is titled %q", got)
	}
	// The store's size is the disk it takes: a few decisions take little,
	// whatever the apparent sizes of the files Badger maps.
	sizeText := text("#health ~ dl.facts > div:nth-child(2) dd")
	var amount float64
	var unit string
	fmt.Sscanf(sizeText, "%g %s", &amount, &unit)
	bytes := amount * map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
	switch {
	case strings.HasPrefix(storage, "data_dir"):
		if bytes <= 0 || bytes > 16<<20 || !strings.Contains(sizeText, "in data_dir") {
			t.Errorf("the overview says the store takes %q", sizeText)
		}
	default:
		if bytes <= 0 || !strings.Contains(sizeText, "tables and indexes") {
			t.Errorf("the overview says the tables take %q", sizeText)
		}
	}
	// The overview refreshes itself: a new decision shows without a reload.
	deliver("req_c", "dlv_6", "invoice.voided", "sub_4")
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](
		`document.querySelector("#src-billing ~ table tbody td.num").textContent === "5"`)); err != nil {
		t.Fatalf("the overview did not refresh itself: %v", err)
	}
	becomes("req_c", "invoices", "dead")

	// Receipts are searched by route and forward state, two a page: the
	// next page goes on where the first ended, and each row leads to its
	// receipt.
	do("search the receipts",
		chromedp.Navigate(ui+"/ui/receipts?limit=2"),
		chromedp.WaitVisible(chromedp.ID("s-target")),
		chromedp.SetValue(chromedp.ID("s-target"), "billing/invoices"),
		chromedp.SetValue(chromedp.ID("s-decision"), "accepted"),
		chromedp.SetValue(chromedp.ID("s-state"), "dead"),
		chromedp.Submit(chromedp.ID("s-target")),
		chromedp.WaitVisible(chromedp.CSS(`#receipts a[href*="request_id=req_c"]`)),
		shot("receipts"),
	)
	found := rows("#receipts tbody tr")
	if len(found) != 2 || !strings.Contains(found[0], "|req_c|accepted|sub_4|") || !strings.Contains(found[1], "|req_b|accepted|sub_2|") ||
		!strings.Contains(found[0], "invoices dead") {
		t.Errorf("the first page of billing/invoices' dead receipts: %q, want req_c then req_b", found)
	}
	do("the next page",
		chromedp.Click(chromedp.CSS(`a[rel="next"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#receipts a[href*="request_id=req_a"]`)),
	)
	if found := rows("#receipts tbody tr"); len(found) != 1 || !strings.Contains(found[0], "|req_a|accepted|sub_1|") {
		t.Errorf("the second page: %q, want req_a", found)
	}
	if last, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('a[rel="next"]') === null && document.getElementById("s-state").value === "dead"`)); err != nil || !last {
		t.Errorf("the last page links a next one, or forgot the search (%v)", err)
	}
	do("open a receipt from the search",
		chromedp.Click(chromedp.CSS(`#receipts a[href*="request_id=req_a"]`)),
		chromedp.WaitVisible(chromedp.CSS("article.receipt")),
	)
	if got := text("#receipt-title"); !strings.Contains(got, "req_a") {
		t.Errorf("the search's row led to %q", got)
	}

	// Paused, analytics takes nothing: a new event waits in its outbox,
	// for every replica, until it is resumed, and then it is sent.
	do("pause analytics",
		chromedp.Navigate(ui+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Pause billing / analytics"]`)),
		chromedp.Click(chromedp.CSS(`button[aria-label="Pause billing / analytics"]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice.ok")),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Resume billing / analytics"]`)),
		shot("overview-paused"),
	)
	if got := text(".notice"); !strings.Contains(got, "billing/analytics is paused") {
		t.Errorf("pause says %q", got)
	}
	if got := text("#route-billing-analytics .state"); got != "paused closed" {
		t.Errorf("a paused route's state reads %q", got)
	}
	routeState := func(route string) map[string]any {
		t.Helper()
		for _, item := range c.items("/admin/routes") {
			if r, _ := item.(map[string]any); r["source"] == "billing" && r["route"] == route {
				return r
			}
		}
		t.Fatalf("the admin API lists no route billing/%s", route)
		return nil
	}
	if r := routeState("analytics"); r["paused"] != true || routeState("invoices")["paused"] != false {
		t.Errorf("after the console paused analytics the admin API says %v", r)
	}
	deliver("req_paused", "dlv_p", "invoice.paid", "sub_6")
	becomes("req_paused", "invoices", "dead")
	if state("req_paused", "analytics") != "pending" || up.count("analytics", "req_paused") != 0 {
		t.Errorf("a paused route sent req_paused: %s", state("req_paused", "analytics"))
	}
	do("resume analytics",
		chromedp.Click(chromedp.CSS(`button[aria-label="Resume billing / analytics"]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Pause billing / analytics"]`)),
	)
	if got := text(".notice"); !strings.Contains(got, "billing/analytics is resumed") {
		t.Errorf("resume says %q", got)
	}
	becomes("req_paused", "analytics", "delivered")
	if r := routeState("analytics"); r["paused"] != false {
		t.Errorf("after the console resumed analytics the admin API says %v", r)
	}

	// A receipt is found by source and request ID, with both its arrivals
	// and the status of each route its filter selected.
	do("look up a receipt",
		chromedp.Navigate(ui+"/ui/receipt"),
		chromedp.WaitVisible(chromedp.ID("r-id")),
		chromedp.SetValue(chromedp.ID("r-source"), "billing"),
		chromedp.SendKeys(chromedp.ID("r-id"), "req_a\n"),
		chromedp.WaitVisible(chromedp.CSS("ol.timeline li:nth-child(2)")),
		shot("receipt"),
	)
	timeline := text("ol.timeline")
	for _, want := range []string{"dlv_1", "dlv_2", "accepted", "duplicate"} {
		if !strings.Contains(timeline, want) {
			t.Errorf("the receipt's deliveries %q do not show %s", timeline, want)
		}
	}
	routes := rows("table.routes tbody tr")
	if len(routes) != 2 || !strings.HasPrefix(routes[0], "invoices|dead|1|503 Service Unavailable|") || !strings.Contains(routes[0], "dead letter") ||
		!strings.HasPrefix(routes[1], "analytics|delivered|1|") || !strings.HasSuffix(routes[1], "|Redeliver") {
		t.Errorf("req_a's routes: %q, want invoices dead and analytics delivered, and not crm", routes)
	}
	if got := text("ul.risks"); !strings.Contains(got, "route invoices: forwarding gave up") || !strings.Contains(got, "route analytics: forwarding is at least once") {
		t.Errorf("req_a's residual risk: %q", got)
	}
	if none, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('button[aria-label="Redeliver to invoices"]') === null`)); err != nil || !none {
		t.Errorf("a dead letter's route offers redelivery (%v)", err)
	}
	// Redeliver to one route sends it there alone.
	do("redeliver to analytics",
		chromedp.Click(chromedp.CSS(`button[aria-label="Redeliver to analytics"]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice.ok")),
	)
	if got := text(".notice"); !strings.Contains(got, "to route analytics") {
		t.Errorf("redeliver to analytics says %q", got)
	}
	waitFor(t, "req_a redelivered to analytics", func() bool { return up.count("analytics", "req_a") == 2 })
	becomes("req_a", "analytics", "delivered")
	if state("req_a", "invoices") != "dead" {
		t.Errorf("a redelivery to analytics changed invoices: %s", state("req_a", "invoices"))
	}
	// A delivery no filter selects is routed nowhere.
	do("look up a ping",
		chromedp.Navigate(ui+"/ui/receipt?source=billing&request_id=req_ping"),
		chromedp.WaitVisible(chromedp.CSS("article.receipt")),
	)
	if got := text("article.receipt"); !strings.Contains(got, "Routed nowhere") {
		t.Errorf("an unrouted receipt: %q", got)
	}

	// The dead letters filtered to one route show that route's only; one
	// retried from there is delivered once its downstream takes it.
	down.up.Store(true)
	do("show the dead letters of invoices",
		chromedp.Navigate(ui+"/ui/deadletters"),
		chromedp.WaitVisible(chromedp.ID("q-target")),
		chromedp.SetValue(chromedp.ID("q-target"), "billing/invoices"),
		chromedp.Submit(chromedp.ID("q-target")),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Retry req_a to invoices"]`)),
		shot("deadletters"),
	)
	dead := rows("table.rows tbody tr")
	if len(dead) != 4 || slices.ContainsFunc(dead, func(r string) bool { return !strings.HasPrefix(r, "invoices|") }) {
		t.Errorf("the dead letters of billing/invoices: %q", dead)
	}
	do("retry a dead letter",
		chromedp.Click(chromedp.CSS(`button[aria-label="Retry req_a to invoices"]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice.ok")),
	)
	if got := text(".notice"); !strings.Contains(got, "billing/invoices/req_a is back in the outbox") {
		t.Errorf("retry says %q", got)
	}
	waitFor(t, "req_a delivered to invoices", func() bool { return down.count("invoices", "req_a") == 1 })
	becomes("req_a", "invoices", "delivered")
	if still := state("req_cus", "crm"); still != "dead" {
		t.Errorf("a retry of invoices changed crm's dead letter: %s", still)
	}
	// Delivered on both routes, the request can go to both again at once.
	do("redeliver to all",
		chromedp.Navigate(ui+"/ui/receipt?source=billing&request_id=req_a"),
		chromedp.WaitVisible(chromedp.CSS("form.all button")),
		chromedp.Click(chromedp.CSS("form.all button")),
		chromedp.WaitVisible(chromedp.CSS(".notice.ok")),
	)
	waitFor(t, "req_a redelivered to both routes", func() bool {
		return down.count("invoices", "req_a") == 2 && up.count("analytics", "req_a") == 3
	})

	// A discard asks first, saying what stays.
	do("ask to discard a dead letter",
		chromedp.Navigate(ui+"/ui/deadletters"),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Discard req_b to invoices"]`)),
		chromedp.Click(chromedp.CSS(`button[aria-label="Discard req_b to invoices"]`)),
		chromedp.WaitVisible(chromedp.CSS(".confirm button.danger")),
		shot("discard-confirm"),
	)
	if got := text("#confirm-text"); !strings.Contains(got, "Its receipt stays, marked discarded on route invoices, and Redeliver to invoices on the receipt can send the request again") {
		t.Errorf("the discard's confirmation says %q", got)
	}
	do("discard it",
		chromedp.Click(chromedp.CSS(".confirm button.danger")),
		chromedp.WaitVisible(chromedp.CSS(".notice.ok")),
	)
	if got := text(".notice"); !strings.Contains(got, "billing/invoices/req_b is discarded") {
		t.Errorf("discard says %q", got)
	}
	if gone, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('button[aria-label="Retry req_b to invoices"]') === null`)); err != nil || !gone {
		t.Errorf("after the discard the dead letters still list req_b (%v)", err)
	}
	if s := state("req_b", "invoices"); s != "discarded" {
		t.Errorf("discarded receipt's invoices route: %s", s)
	}
	// As the confirmation said, the receipt can still send the request.
	do("redeliver the discarded request",
		chromedp.Navigate(ui+"/ui/receipt?source=billing&request_id=req_b"),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Redeliver to invoices"]`)),
		chromedp.Click(chromedp.CSS(`button[aria-label="Redeliver to invoices"]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice.ok")),
	)
	waitFor(t, "req_b delivered after its discard", func() bool { return down.count("invoices", "req_b") == 1 })

	// Every dead letter of billing is retried at once, once the
	// confirmation has named how many: the refused crm event and the two
	// invoices the downstream refused, which now takes them.
	do("ask to retry every dead letter of billing",
		chromedp.Navigate(ui+"/ui/deadletters?filter=billing"),
		chromedp.WaitVisible(chromedp.CSS(`.bulk button[value="retry"]`)),
	)
	if got := text(`.bulk button[value="retry"]`); got != "Retry all 3" {
		t.Errorf("the bulk retry button says %q, want Retry all 3", got)
	}
	do("see the confirmation",
		chromedp.Click(chromedp.CSS(`.bulk button[value="retry"]`)),
		chromedp.WaitVisible(chromedp.CSS(".confirm button")),
		shot("bulk-confirm"),
	)
	if got := text("#confirm-title"); got != "Retry all 3 dead letters of billing?" {
		t.Errorf("the bulk retry's confirmation asks %q", got)
	}
	if s := state("req_cus", "crm"); s != "dead" {
		t.Errorf("the bulk retry ran before it was confirmed: req_cus is %s on crm", s)
	}
	do("confirm the bulk retry",
		chromedp.Click(chromedp.CSS(".confirm button")),
		chromedp.WaitVisible(chromedp.CSS(".notice.ok")),
	)
	if got := text(".notice"); !strings.Contains(got, "Retried the dead letters of billing: 3 back in the outbox with their attempts reset, 0 refused") {
		t.Errorf("the bulk retry says %q", got)
	}
	waitFor(t, "the dead letters retried in bulk delivered", func() bool {
		return down.count("crm", "req_cus") == 1 && down.count("invoices", "req_c") == 1 && down.count("invoices", "req_paused") == 1
	})
	becomes("req_cus", "crm", "delivered")

	// A new decision appears in the live tail as it is made.
	do("open the live tail",
		chromedp.Navigate(ui+"/ui/tail"),
		chromedp.WaitVisible(chromedp.ID("tail")),
	)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("stream-state").textContent.startsWith("Live")`)); err != nil {
		t.Fatalf("the live tail does not connect: %v", err)
	}
	deliver("req_live", "dlv_9", "invoice.paid", "sub_3")
	do("watch it arrive",
		chromedp.WaitVisible(chromedp.CSS(`#tail a[href*="request_id=req_live"]`)),
	)
	// A refused request shows its request ID, with no link to a receipt it
	// has not got.
	if status, _ := c.send(http.MethodPost, "http://"+c.public+"/hooks/billing", `{"request_id":"req_bad","type":"invoice.paid","object":{"id":"sub_9","version":"x"}}`, nil); status != http.StatusBadRequest {
		t.Fatalf("a bad version: %d, want 400", status)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`[...document.querySelectorAll("#tail td")].some(td => td.textContent === "req_bad")`)); err != nil {
		t.Fatalf("the refusal does not appear in the live tail: %v", err)
	}
	do("see it refused", shot("tail"))
	if linked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#tail a[href*="req_bad"]') !== null`)); err != nil || linked {
		t.Errorf("the live tail links a refused request to a receipt (%v)", err)
	}

	// A POST without the CSRF token is refused, from the console's own page.
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](
		`fetch("/ui/deadletters/retry", {method: "POST", body: new URLSearchParams({source: "billing", route: "crm", request_id: "req_cus"})}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if err != nil || status != http.StatusForbidden {
		t.Errorf("POST without a CSRF token: %d %v, want 403", status, err)
	}

	for _, page := range []string{"outbox", "resource?source=billing&resource=sub_1"} {
		do("show "+page, chromedp.Navigate(ui+"/ui/"+page), chromedp.WaitVisible(chromedp.CSS("main h1")),
			shot(strings.SplitN(page, "?", 2)[0]))
	}
	do("a phone's view of the overview",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(ui+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("src-billing")),
		shot("overview-phone"),
	)
	// On a phone each row of a table is a card: a dead letter's actions are
	// on screen and can be used, and no page scrolls sideways.
	down.up.Store(false)
	deliver("req_phone", "dlv_10", "invoice.paid", "sub_5")
	becomes("req_phone", "invoices", "dead")
	do("a phone's view of the dead letters",
		chromedp.Navigate(ui+"/ui/deadletters"),
		chromedp.WaitVisible(chromedp.CSS(`button[aria-label="Retry req_phone to invoices"]`)),
		shot("deadletters-phone"),
	)
	onScreen := func(what, sel string) {
		t.Helper()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
			const all = [...document.querySelectorAll(%q)];
			return all.length > 0 && all.every(b => { const r = b.getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth; });
		})()`, sel)))
		if err != nil || !ok {
			t.Errorf("on a phone, %s are not all within the screen's width (%v)", what, err)
		}
	}
	noSideways := func(page string) {
		t.Helper()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
		if err != nil || !ok {
			t.Errorf("on a phone, %s is wider than the screen (%v)", page, err)
		}
	}
	onScreen("the dead letters' Retry and Discard buttons", ".actions button")
	noSideways("the dead letters")
	do("discard on a phone",
		chromedp.Click(chromedp.CSS(`button[aria-label="Discard req_phone to invoices"]`)),
		chromedp.WaitVisible(chromedp.CSS(".confirm button.danger")),
		shot("discard-confirm-phone"),
	)
	onScreen("the confirmation's buttons", ".confirm button, .confirm .button")
	do("confirm it", chromedp.Click(chromedp.CSS(".confirm button.danger")), chromedp.WaitVisible(chromedp.CSS(".notice.ok")))
	do("a phone's view of a receipt's routes",
		chromedp.Navigate(ui+"/ui/receipt?source=billing&request_id=req_phone"),
		chromedp.WaitVisible(chromedp.CSS("table.routes")),
		shot("receipt-phone"),
	)
	onScreen("the routes' Redeliver buttons", "table.routes button")
	noSideways("the receipt")
	for _, page := range []string{"tail", "outbox", "receipts"} {
		do("a phone's view of "+page,
			chromedp.Navigate(ui+"/ui/"+page),
			chromedp.WaitVisible(chromedp.CSS("main h1")),
			shot(page+"-phone"),
		)
		noSideways(page)
	}
}
