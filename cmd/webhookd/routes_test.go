package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookd/webhookd/postgres/pgtest"
)

// routeDownstream is one route's service: it records what arrives and
// answers 503 while failing is set.
type routeDownstream struct {
	t       *testing.T
	route   string
	failing atomic.Bool
	mu      sync.Mutex
	keys    map[string]int
	seen    []string // "resource version" in arrival order
	refused int
}

func newRouteDownstream(t *testing.T, route string) (*routeDownstream, *httptest.Server) {
	d := &routeDownstream{t: t, route: route, keys: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		d.mu.Lock()
		defer d.mu.Unlock()
		if got := r.Header.Get("Webhook-Route"); got != route {
			t.Errorf("route %s got a request naming route %q", route, got)
		}
		if d.failing.Load() {
			d.refused++
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		d.keys[r.Header.Get("Idempotency-Key")]++
		d.seen = append(d.seen, r.Header.Get("Webhook-Resource")+" "+r.Header.Get("Webhook-Version"))
	}))
	t.Cleanup(srv.Close)
	return d, srv
}

// check fails the test unless the downstream received each of want at
// least once, nothing else, and each resource's versions in order.
func (d *routeDownstream) check(want map[string]bool) {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range want {
		if d.keys[id] == 0 {
			d.t.Errorf("route %s never received %s", d.route, id)
		}
	}
	for id := range d.keys {
		if !want[id] {
			d.t.Errorf("route %s received %s, which its filter does not select", d.route, id)
		}
	}
	last := map[string]int{}
	for _, s := range d.seen {
		res, v, _ := strings.Cut(s, " ")
		n, _ := strconv.Atoi(v)
		if n < last[res] {
			d.t.Errorf("route %s: %s version %d arrived after %d", d.route, res, n, last[res])
		}
		last[res] = n
	}
	d.t.Logf("route %s: %d request IDs expected, %d requests received, %d refused", d.route, len(want), len(d.seen), d.refused)
}

// routeEvent is delivery i of the fan-out test: a Stripe-like event whose
// type and account the routes' filters read.
type routeEvent struct {
	id, typ, account, object string
	version                  int
}

func newRouteEvent(i int) routeEvent {
	const resources = 40
	return routeEvent{
		id:      fmt.Sprint("evt_", i),
		typ:     []string{"invoice.paid", "customer.updated", "invoice.created", "charge.succeeded"}[i%4],
		account: []string{"acct_1", "acct_2", "acct_3"}[i%3],
		object:  fmt.Sprint("obj_", i%resources),
		version: i/resources + 1,
	}
}

func (e routeEvent) body() string {
	return fmt.Sprintf(`{"id":%q,"type":%q,"account":%q,"version":%d,"data":{"object":{"id":%q}}}`, e.id, e.typ, e.account, e.version, e.object)
}

// routes returns the routes whose filter selects e, as routesConfig
// configures them.
func (e routeEvent) routes() []string {
	var routes []string
	if strings.HasPrefix(e.typ, "invoice.") {
		routes = append(routes, "billing")
	}
	routes = append(routes, "analytics")
	if e.account == "acct_1" {
		routes = append(routes, "audit")
	}
	return routes
}

// routesConfig is one Stripe-like source fanned out to three filtered
// routes; storage is the storage line.
func routesConfig(storage, listen, admin string, urls map[string]string) string {
	return fmt.Sprintf(`
listen: %q
%s
shutdown_timeout: 5s
log: { level: warn }
admin: { listen: %q, token: %q }
sources:
  - name: events
    request_id: json:id
    resource: json:data.object.id
    version: json:version
    routes:
      - name: billing
        url: %q
        filter: 'body.type.startsWith("invoice.")'
        timeout: 2s
        max_attempts: 10000
        backoff: { initial: 10ms, max: 100ms }
      - name: analytics
        url: %q
        timeout: 2s
        max_attempts: 10000
        backoff: { initial: 10ms, max: 100ms }
      - name: audit
        url: %q
        filter: 'has(body.account) && body.account == "acct_1"'
        timeout: 2s
        max_attempts: 10000
        backoff: { initial: 10ms, max: 100ms }
`, listen, storage, admin, adminToken, urls["billing"], urls["analytics"], urls["audit"])
}

// TestRoutesFanOutEndToEnd runs the real binary with one source feeding
// three filtered routes, on Badger and on PostgreSQL with two replicas:
// deliveries with redeliveries and versions out of order, the audit
// route's service answering 503 throughout, and a SIGKILL mid-load. Then
// each working route received exactly what its filter selects of the
// accepted requests, in per-resource version order; the failing route
// dead-lettered nothing and held up no other route; once its service
// recovers, it receives its share the same way.
func TestRoutesFanOutEndToEnd(t *testing.T) {
	t.Run("badger", func(t *testing.T) {
		routesFanOut(t, 1, func(t *testing.T) string { return fmt.Sprintf("data_dir: %q", filepath.Join(t.TempDir(), "data")) })
	})
	t.Run("postgres", func(t *testing.T) {
		routesFanOut(t, 2, func(t *testing.T) string {
			return fmt.Sprintf("storage: { backend: postgres, dsn: %q }", pgtest.SchemaDSN(t, "routes"))
		})
	})
}

func routesFanOut(t *testing.T, replicas int, storage func(t *testing.T) string) {
	downs, urls := map[string]*routeDownstream{}, map[string]string{}
	for _, route := range []string{"billing", "analytics", "audit"} {
		d, srv := newRouteDownstream(t, route)
		downs[route], urls[route] = d, srv.URL
	}
	downs["audit"].failing.Store(true)

	storageLine := storage(t)
	type replica struct {
		public, admin, config string
		p                     *process
	}
	var reps []*replica
	for i := range replicas {
		r := &replica{public: freeAddr(t), admin: freeAddr(t)}
		r.config = filepath.Join(t.TempDir(), fmt.Sprintf("webhookd-%d.yaml", i))
		if err := os.WriteFile(r.config, []byte(routesConfig(storageLine, r.public, r.admin, urls)), 0o600); err != nil {
			t.Fatal(err)
		}
		reps = append(reps, r)
	}
	var wg sync.WaitGroup
	for _, r := range reps {
		wg.Go(func() { r.p = startBinary(t, r.config, r.public) })
	}
	wg.Wait()

	const total = 2000
	// Versions of a resource arrive out of order within windows.
	order := make([]int, total)
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for w := 0; w < total; w += 160 {
		window := order[w:min(w+160, total)]
		rng.Shuffle(len(window), func(a, b int) { window[a], window[b] = window[b], window[a] })
	}
	post := func(i, first int) {
		for k := range len(reps) {
			r := reps[(first+k)%len(reps)]
			resp, err := http.Post("http://"+r.public+"/hooks/events", "application/json", strings.NewReader(newRouteEvent(i).body()))
			if err != nil {
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return
			}
		}
	}
	send := func(at func(sent int)) {
		work := make(chan int)
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() {
				for n := range work {
					post(order[n], n%len(reps))
					if n%5 == 0 { // a redelivery, to another replica where there is one
						post(order[n], (n+1)%len(reps))
					}
				}
			})
		}
		for n := range total {
			at(n)
			work <- n
		}
		close(work)
		wg.Wait()
	}

	victim := reps[len(reps)-1]
	send(func(sent int) {
		switch sent {
		case total / 3:
			victim.p.kill() // mid-load, with requests and claims in flight
		case total / 2:
			victim.p = startBinary(t, victim.config, victim.public)
		}
	})
	// The provider sends again whatever it got no 2xx for, and more.
	send(func(int) {})

	c := &client{t: t, public: reps[0].public, admin: reps[0].admin}
	want := map[string]map[string]bool{"billing": {}, "analytics": {}, "audit": {}}
	for i := range total {
		e := newRouteEvent(i)
		status, r := c.adminCall(http.MethodGet, "/admin/receipts/events/"+e.id)
		if status != 200 {
			t.Fatalf("receipt %s: %d %v", e.id, status, r)
		}
		if r["decision"] != "accepted" {
			continue
		}
		var routes []string
		list, _ := r["routes"].([]any)
		for _, rs := range list {
			routes = append(routes, rs.(map[string]any)["route"].(string))
		}
		if !slices.Equal(routes, e.routes()) {
			t.Errorf("%s (%s, %s) was routed to %v, want %v", e.id, e.typ, e.account, routes, e.routes())
		}
		for _, route := range e.routes() {
			want[route][e.id] = true
		}
	}

	// The working routes drain while audit's service still fails.
	deadline := time.Now().Add(90 * time.Second)
	for _, route := range []string{"billing", "analytics"} {
		for len(c.items("/admin/outbox?source=events&route="+route)) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("route %s's outbox still holds %d entries", route, len(c.items("/admin/outbox?source=events&route="+route)))
			}
			time.Sleep(100 * time.Millisecond)
		}
		downs[route].check(want[route])
	}
	if dead := c.items("/admin/deadletters"); len(dead) > 0 {
		t.Fatalf("%d dead letters while no route reached max_attempts: %v", len(dead), dead[0])
	}
	if n := len(c.items("/admin/outbox?source=events&route=audit")); n != len(want["audit"]) {
		t.Errorf("audit's outbox holds %d entries, want one per accepted acct_1 event (%d)", n, len(want["audit"]))
	}

	downs["audit"].failing.Store(false)
	for len(c.items("/admin/outbox")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the outbox still holds %d entries after audit's service recovered", len(c.items("/admin/outbox")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	downs["audit"].check(want["audit"])
}
