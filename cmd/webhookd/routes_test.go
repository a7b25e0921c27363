package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookd/webhookd/postgres/pgtest"
)

// routesConfig is a gateway with one source and three filtered routes:
// invoices to billing, everything to analytics, one account's events to
// audit. storage is the storage: line.
func routesConfig(storage, listen, adminListen, billingURL, analyticsURL, auditURL string) string {
	route := func(name, url, filter string) string {
		r := fmt.Sprintf("      - name: %s\n        url: %q\n        timeout: 2s\n        max_attempts: 10000\n        backoff: { initial: 10ms, max: 100ms }\n        breaker: { cooldown: 100ms, max_cooldown: 1s }\n", name, url)
		if filter != "" {
			r += fmt.Sprintf("        filter: %q\n", filter)
		}
		return r
	}
	return fmt.Sprintf(`
listen: %q
%s
shutdown_timeout: 5s
log: { level: warn }
admin: { listen: %q, token: %q }
sources:
  - name: stripe
    request_id: json:id
    resource: json:object.id
    version: json:object.version
    routes:
`, listen, storage, adminListen, adminToken) +
		route("billing", billingURL, `body.type.startsWith("invoice.")`) +
		route("analytics", analyticsURL, "") +
		route("audit", auditURL, `body.account == "acct_1"`)
}

// event is delivery i of TestRoutesEndToEnd: resources get their versions
// in turn, and every kind of event goes to every account.
func event(i int) (body string, invoice, audited bool) {
	const resources = 40
	kinds := []string{"invoice.paid", "customer.updated", "invoice.created"}
	kind, account := kinds[i%len(kinds)], fmt.Sprint("acct_", i%4)
	body = fmt.Sprintf(`{"id":"evt_%d","type":%q,"account":%q,"object":{"id":"obj_%d","version":%d}}`,
		i, kind, account, i%resources, i/resources+1)
	return body, strings.HasPrefix(kind, "invoice."), account == "acct_1"
}

// TestRoutesEndToEnd runs the real binary with three filtered routes of
// one source, on Badger and on PostgreSQL with two replicas. 2,000
// deliveries arrive with redeliveries and versions out of order, one
// process is SIGKILLed mid-load and started again, and the audit route's
// downstream answers 503 the whole run. Then each other route has
// received exactly the accepted deliveries its filter selects, each at
// least once, in per-resource order; nothing of audit was dead-lettered;
// and once audit's downstream recovers it gets its own, in order too.
func TestRoutesEndToEnd(t *testing.T) {
	for _, backend := range []string{"badger", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			billingRec, billing := routeRecorder(t, "billing", nil)
			analyticsRec, analytics := routeRecorder(t, "analytics", nil)
			var auditUp atomic.Bool
			auditRec, audit := routeRecorder(t, "audit", &auditUp)
			var storage []string
			switch backend {
			case "badger":
				storage = []string{fmt.Sprintf("data_dir: %q", filepath.Join(t.TempDir(), "data"))}
			case "postgres":
				dsn := pgtest.SchemaDSN(t, t.Name())
				line := fmt.Sprintf("storage: { backend: postgres, dsn: %q }", dsn)
				storage = []string{line, line}
			}
			type replica struct {
				public, admin, config string
				p                     *process
			}
			var reps []*replica
			for i, s := range storage {
				r := &replica{public: freeAddr(t), admin: freeAddr(t)}
				r.config = filepath.Join(t.TempDir(), fmt.Sprintf("webhookd-%d.yaml", i))
				yaml := routesConfig(s, r.public, r.admin, billing.URL, analytics.URL, audit.URL)
				if err := os.WriteFile(r.config, []byte(yaml), 0o600); err != nil {
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
			var mu sync.Mutex
			accepted := map[string]int{}
			post := func(i, first int) {
				body, _, _ := event(i)
				for k := range len(reps) {
					r := reps[(first+k)%len(reps)]
					resp, err := http.Post("http://"+r.public+"/hooks/stripe", "application/json", strings.NewReader(body))
					if err != nil {
						continue
					}
					decision := resp.Header.Get("Webhook-Decision")
					resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						continue
					}
					if decision == "accepted" {
						mu.Lock()
						accepted[fmt.Sprint("evt_", i)]++
						mu.Unlock()
					}
					return
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
					victim.p.kill()
				case total / 2:
					victim.p = startBinary(t, victim.config, victim.public)
				}
			})
			send(func(int) {}) // the provider sends again what got no 2xx, and more

			c := &client{t: t, public: reps[0].public, admin: reps[0].admin}
			drained := func(route string) func() bool {
				return func() bool { return len(c.items("/admin/outbox?source=stripe&route="+route)) == 0 }
			}
			// A killed replica's claims end after their lease (timeout + 30s).
			waitLong(t, "billing's and analytics' outboxes drained", func() bool { return drained("billing")() && drained("analytics")() })
			if n := len(c.items("/admin/deadletters?source=stripe")); n != 0 {
				t.Fatalf("%d dead letters while audit's downstream fails, want none before max_attempts", n)
			}
			if len(c.items("/admin/outbox?source=stripe&route=audit")) == 0 {
				t.Fatal("audit's outbox is empty while its downstream fails")
			}

			// Every request was decided once; what each route must have got.
			want := map[string]map[string]bool{"billing": {}, "analytics": {}, "audit": {}}
			for i := range total {
				id := fmt.Sprint("evt_", i)
				status, r := c.adminCall(http.MethodGet, "/admin/receipts/stripe/"+url.PathEscape(id))
				if status != 200 {
					t.Fatalf("receipt %s: %d %v", id, status, r)
				}
				if accepted[id] > 1 {
					t.Errorf("%s accepted %d times", id, accepted[id])
				}
				if r["decision"] != "accepted" {
					if accepted[id] > 0 {
						t.Errorf("%s was answered accepted, its receipt says %v", id, r["decision"])
					}
					continue
				}
				_, invoice, audited := event(i)
				routes := []string{"analytics"}
				if invoice {
					routes = append([]string{"billing"}, routes...)
				}
				if audited {
					routes = append(routes, "audit")
				}
				var got []string
				list, _ := r["routes"].([]any)
				for _, rs := range list {
					got = append(got, fmt.Sprint(rs.(map[string]any)["route"]))
				}
				if !slices.Equal(got, routes) {
					t.Errorf("%s's receipt names routes %v, want %v", id, got, routes)
				}
				for _, route := range routes {
					want[route][id] = true
				}
			}
			check := func(route string, rec *recorder) {
				t.Helper()
				rec.mu.Lock()
				for key := range rec.keys {
					if !want[route][key] {
						t.Errorf("%s got %s, which its filter does not select or which was not accepted", route, key)
					}
				}
				for key := range want[route] {
					if rec.keys[key] == 0 {
						t.Errorf("%s never got %s", route, key)
					}
				}
				rec.mu.Unlock()
				t.Logf("%s: %d selected, %d requests", route, len(want[route]), rec.checkOrder(t))
			}
			check("billing", billingRec)
			check("analytics", analyticsRec)

			auditUp.Store(true)
			waitLong(t, "audit's outbox drained", drained("audit"))
			check("audit", auditRec)
		})
	}
}

// routeRecorder is route's downstream: a recorder that fails the test on
// a request naming another route, and answers 503 while up is false (up
// nil: always up).
func routeRecorder(t *testing.T, route string, up *atomic.Bool) (*recorder, *httptest.Server) {
	rec := &recorder{keys: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Webhook-Route"); got != route {
			t.Errorf("%s's downstream got a request for route %q", route, got)
		}
		if up != nil && !up.Load() {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rec.serve(w, r)
	}))
	t.Cleanup(srv.Close)
	return rec, srv
}

// waitLong waits for cond for up to 90 s: long enough for a killed
// replica's claims to end.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
