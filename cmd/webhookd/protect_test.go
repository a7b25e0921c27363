package main

import (
	"encoding/json"
	"fmt"
	"io"
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

// These tests run the real binary against a downstream that records when
// each request arrived, and check what the routes' protections promise:
// the rate limit, the circuit breaker and pause hold for the sum of the
// replicas sharing PostgreSQL, and a bulk retry puts every dead letter
// back in per-resource order.

// arrival is one request the downstream received.
type arrival struct {
	at       time.Time
	path     string // the route's URL path
	id       string
	resource string
	seq      int
	status   int // what the downstream answered
}

// downstream answers every request with status, and records it.
type downstream struct {
	status atomic.Int32
	mu     sync.Mutex
	got    []arrival
}

func newDownstream(t *testing.T, status int) (*downstream, *httptest.Server) {
	d := &downstream{}
	d.status.Store(int32(status))
	srv := httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(srv.Close)
	return d, srv
}

func (d *downstream) serve(w http.ResponseWriter, r *http.Request) {
	a := arrival{at: time.Now(), path: r.URL.Path}
	raw, _ := io.ReadAll(r.Body)
	var body struct {
		ID    string `json:"id"`
		Order string `json:"order"`
		Seq   int    `json:"seq"`
	}
	json.Unmarshal(raw, &body)
	a.id, a.resource, a.seq = body.ID, body.Order, body.Seq
	d.mu.Lock()
	a.status = int(d.status.Load())
	d.got = append(d.got, a)
	d.mu.Unlock()
	w.WriteHeader(a.status)
}

// arrivals returns what arrived on path, answered with a status for which
// keep is true, in arrival order.
func (d *downstream) arrivals(path string, keep func(status int) bool) []arrival {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []arrival
	for _, a := range d.got {
		if a.path == path && keep(a.status) {
			out = append(out, a)
		}
	}
	return out
}

func ok(status int) bool     { return status/100 == 2 }
func failed(status int) bool { return status/100 != 2 }

// delivered returns how many distinct requests path answered 2xx.
func (d *downstream) delivered(path string) int {
	seen := map[string]bool{}
	for _, a := range d.arrivals(path, ok) {
		seen[a.id] = true
	}
	return len(seen)
}

// checkOrder fails t where a resource's requests, answered 2xx on path,
// arrived out of their sequence: one may come twice (forwarding is at
// least once), never after a later one.
func (d *downstream) checkOrder(t *testing.T, path string) {
	t.Helper()
	last := map[string]int{}
	for _, a := range d.arrivals(path, ok) {
		if a.seq < last[a.resource] {
			t.Errorf("%s: %s (seq %d) arrived after seq %d", path, a.id, a.seq, last[a.resource])
		}
		last[a.resource] = a.seq
	}
}

// protectConfig is a gateway on public and admin, its store storage (a
// data_dir or a storage: line), with two sources forwarding to the
// downstream at down: orders, versioned, and events, whose resources have
// no versions. routes is the YAML of each source's routes, at its indent,
// with %s where the downstream's URL goes.
func protectConfig(storage, public, admin, down, routes string) string {
	r := strings.ReplaceAll(routes, "%s", down)
	return fmt.Sprintf(`
listen: %q
%s
shutdown_timeout: 5s
log: { level: warn }
admin: { listen: %q, token: %q }
sources:
  - name: orders
    request_id: json:id
    resource: json:order
    version: json:seq
    routes:
%s
  - name: events
    request_id: json:id
    resource: json:order
    routes:
%s
`, public, storage, admin, adminToken, r, r)
}

func pgStorage(t *testing.T) string {
	return fmt.Sprintf("storage: { backend: postgres, dsn: %q }", pgtest.SchemaDSN(t, t.Name()))
}

// replica is one webhookd process of a test.
type replica struct {
	public, admin, config string
	p                     *process
	c                     *client
}

// startReplicas starts n processes on the config that yaml returns for
// their addresses, together: on one PostgreSQL schema, they migrate it
// under one lock.
func startReplicas(t *testing.T, n int, yaml func(public, admin string) string) []*replica {
	t.Helper()
	var reps []*replica
	for i := range n {
		r := &replica{public: freeAddr(t), admin: freeAddr(t)}
		r.config = filepath.Join(t.TempDir(), fmt.Sprintf("webhookd-%d.yaml", i))
		if err := os.WriteFile(r.config, []byte(yaml(r.public, r.admin)), 0o600); err != nil {
			t.Fatal(err)
		}
		r.c = &client{t: t, public: r.public, admin: r.admin}
		reps = append(reps, r)
	}
	var wg sync.WaitGroup
	for _, r := range reps {
		wg.Go(func() { r.p = startBinary(t, r.config, r.public) })
	}
	wg.Wait()
	return reps
}

// postAll posts perResource requests for each of resources resources to
// source, spread over reps; each resource's requests go one after the
// other, in sequence, and the resources in parallel. It returns how many
// were accepted.
func postAll(t *testing.T, reps []*replica, source string, resources, perResource int) int {
	t.Helper()
	var accepted atomic.Int64
	var wg sync.WaitGroup
	for r := range resources {
		wg.Go(func() {
			for seq := 1; seq <= perResource; seq++ {
				id := fmt.Sprintf("%s-r%d-%d", source, r, seq)
				body := fmt.Sprintf(`{"id":%q,"order":"r%d","seq":%d}`, id, r, seq)
				rep := reps[(r+seq)%len(reps)]
				resp, err := http.Post("http://"+rep.public+"/hooks/"+source, "application/json", strings.NewReader(body))
				if err != nil {
					t.Errorf("post %s: %v", id, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.Header.Get("Webhook-Decision") != "accepted" {
					t.Errorf("post %s: %d %s, want accepted", id, resp.StatusCode, resp.Header.Get("Webhook-Decision"))
					return
				}
				accepted.Add(1)
			}
		})
	}
	wg.Wait()
	return int(accepted.Load())
}

// route returns the item of GET /admin/routes for source's route.
func (c *client) route(source, route string) map[string]any {
	c.t.Helper()
	for _, it := range c.items("/admin/routes") {
		if m := it.(map[string]any); m["source"] == source && m["route"] == route {
			return m
		}
	}
	c.t.Fatalf("GET /admin/routes: no %s/%s", source, route)
	return nil
}

// requestIDsOf returns the request ID of each item of a list.
func requestIDsOf(items []any) []string {
	var ids []string
	for _, it := range items {
		ids = append(ids, it.(map[string]any)["request_id"].(string))
	}
	return ids
}

// search follows a list's next_cursor from path's first page to its last,
// and returns the request ID of every item.
func (c *client) search(path string) []string {
	c.t.Helper()
	var ids []string
	cursor := ""
	for {
		status, body := c.adminCall(http.MethodGet, path+"&cursor="+url.QueryEscape(cursor))
		if status != 200 {
			c.t.Fatalf("GET %s: %d %v", path, status, body)
		}
		items, _ := body["items"].([]any)
		ids = append(ids, requestIDsOf(items)...)
		if cursor, _ = body["next_cursor"].(string); cursor == "" {
			return ids
		}
	}
}

// drained says the outbox is empty.
func (c *client) drained() bool {
	status, body := c.adminCall(http.MethodGet, "/admin/outbox?limit=1")
	items, _ := body["items"].([]any)
	return status == 200 && len(items) == 0
}

// mostInAWindow returns the most arrivals in any window of length w.
func mostInAWindow(as []arrival, w time.Duration) int {
	most, j := 0, 0
	for i := range as {
		for j < len(as) && as[j].at.Sub(as[i].at) < w {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// A route's rate holds for the sum of two replicas: under a backlog, the
// downstream never sees more than the rate plus the burst start in any
// second. The bucket is kept in the database, so both replicas draw on
// one budget; the tolerance is for the time between a grant and the
// request's arrival, which varies by a few milliseconds per request and
// lets a window catch a little more than a second's grants.
func TestRateHoldsAcrossReplicas(t *testing.T) {
	const rate, burst = 100, 10 // burst: the default, a tenth of the rate
	const tolerance = rate / 5
	const resources, perResource = 10, 150
	down, srv := newDownstream(t, 200)
	routes := fmt.Sprintf(`      - name: erp
        url: %%s/erp
        timeout: 2s
        concurrency: 16
        rate: %d/s
`, rate)
	storage := pgStorage(t)
	reps := startReplicas(t, 2, func(public, admin string) string {
		return protectConfig(storage, public, admin, srv.URL, routes)
	})
	if got := reps[1].c.route("orders", "erp"); got["rate"] != "100/s" || got["burst"] != float64(burst) {
		t.Errorf("the route's limits: %v", got)
	}
	total := postAll(t, reps, "orders", resources, perResource)
	waitLong(t, "the backlog to drain", func() bool {
		return down.delivered("/erp") == total
	})
	got := down.arrivals("/erp", func(int) bool { return true })
	if most := mostInAWindow(got, time.Second); most > rate+burst+tolerance {
		t.Errorf("%d requests arrived in one second; the rate allows %d a second with a burst of %d (tolerance %d)", most, rate, burst, tolerance)
	} else {
		t.Logf("%d requests, at most %d in any second (rate %d/s, burst %d)", len(got), most, rate, burst)
	}
	down.checkOrder(t, "/erp")
	waitFor(t, "an empty outbox", reps[0].c.drained)
}

// A downstream down for far longer than max_attempts × backoff opens the
// route's breaker: no entry is dead-lettered, the two replicas together
// send one probe per cool-down while it is open, and once it recovers
// everything is delivered in order.
func TestBreakerHoldsAcrossReplicas(t *testing.T) {
	const (
		failures    = 3
		concurrency = 1
		replicas    = 2
		cooldown    = time.Second
		outage      = 8 * time.Second
	)
	down, srv := newDownstream(t, http.StatusServiceUnavailable)
	routes := fmt.Sprintf(`      - name: erp
        url: %%s/erp
        timeout: 2s
        concurrency: %d
        max_attempts: %d
        backoff: { initial: 10ms, max: 50ms }
        breaker: { failures: %d, cooldown: %s, max_cooldown: %s }
`, concurrency, failures, failures, cooldown, cooldown)
	storage := pgStorage(t)
	reps := startReplicas(t, replicas, func(public, admin string) string {
		return protectConfig(storage, public, admin, srv.URL, routes)
	})
	total := postAll(t, reps, "orders", 4, 10)

	// The outage lasts from the first request the downstream gets.
	waitFor(t, "a first request", func() bool { return len(down.arrivals("/erp", failed)) > 0 })
	up := time.AfterFunc(outage, func() { down.status.Store(http.StatusOK) })
	defer up.Stop()
	sawOpen := false
	for down.status.Load() != http.StatusOK {
		if st := reps[1].c.route("orders", "erp"); st["circuit"] == "open" && st["open_until"] != nil {
			sawOpen = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !sawOpen {
		t.Error("the admin API never showed the breaker open during the outage")
	}
	waitLong(t, "everything delivered after the outage", func() bool {
		return down.delivered("/erp") == total
	})

	refused := down.arrivals("/erp", failed)
	// Before the breaker opens: failures in a row, and what the other
	// replica had in flight. Then probes, one per cool-down for both
	// replicas together.
	before := failures + replicas*concurrency
	probes := max(0, len(refused)-before)
	if most := before + int(outage/cooldown) + 1; len(refused) > most {
		t.Errorf("the downstream got %d requests while down for %s; one probe per %s allows %d", len(refused), outage, cooldown, most)
	}
	if probes < 2 {
		t.Errorf("%d probes while down for %s (cool-down %s): the breaker did not probe", probes, outage, cooldown)
	}
	for i := before + 1; i < len(refused); i++ {
		if gap := refused[i].at.Sub(refused[i-1].at); gap < cooldown*9/10 {
			t.Errorf("probes %d and %d %s apart, under the cool-down %s", i-1, i, gap, cooldown)
		}
	}
	t.Logf("%d requests while down (%d probes), %d delivered after", len(refused), probes, down.delivered("/erp"))
	if items := reps[0].c.items("/admin/deadletters"); len(items) != 0 {
		t.Errorf("%d dead letters after an outage the breaker covered: %v", len(items), items)
	}
	down.checkOrder(t, "/erp")
	if st := reps[0].c.route("orders", "erp"); st["circuit"] != "closed" || st["failures"] != 0.0 {
		t.Errorf("the route after it recovered: %v", st)
	}
	waitFor(t, "an empty outbox", reps[0].c.drained)
}

// A route paused through one replica's admin API stays paused when that
// replica restarts, and the other replica sends nothing to it either,
// while the source's other route goes on; resumed through the other
// replica, its backlog drains in order. On Badger, the one process keeps
// the pause across its restart.
func TestPauseAcrossReplicasAndRestarts(t *testing.T) {
	for _, backend := range []string{"badger", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			down, srv := newDownstream(t, 200)
			routes := `      - name: erp
        url: %s/erp
      - name: ledger
        url: %s/ledger
`
			storage, replicas := fmt.Sprintf("data_dir: %q", filepath.Join(t.TempDir(), "data")), 1
			if backend == "postgres" {
				storage, replicas = pgStorage(t), 2
			}
			reps := startReplicas(t, replicas, func(public, admin string) string {
				return protectConfig(storage, public, admin, srv.URL, routes)
			})
			a, b := reps[0], reps[len(reps)-1]
			status, body := a.c.adminCall(http.MethodPost, "/admin/routes/orders/erp/pause")
			if status != 200 || body["paused"] != true {
				t.Fatalf("pause: %d %v", status, body)
			}
			a.p.kill()
			a.p = startBinary(t, a.config, a.public)
			for _, r := range reps {
				if st := r.c.route("orders", "erp"); st["paused"] != true {
					t.Errorf("%s after A restarted: erp %v, want paused", r.public, st)
				}
				if st := r.c.route("orders", "ledger"); st["paused"] != false {
					t.Errorf("%s: ledger %v, want not paused", r.public, st)
				}
			}

			total := postAll(t, reps, "orders", 3, 10)
			// Every replica forwards ledger's entries, decided with erp's:
			// once they are all delivered, each had erp's to send too.
			waitLong(t, "ledger's deliveries", func() bool { return down.delivered("/ledger") == total })
			if got := down.arrivals("/erp", func(int) bool { return true }); len(got) != 0 {
				t.Fatalf("the paused route got %d requests", len(got))
			}
			if st := b.c.route("orders", "erp"); st["pending"] != float64(total) {
				t.Errorf("erp while paused: %v, want %d pending", st, total)
			}

			status, body = b.c.adminCall(http.MethodPost, "/admin/routes/orders/erp/resume")
			if status != 200 || body["paused"] != false {
				t.Fatalf("resume: %d %v", status, body)
			}
			waitLong(t, "erp's backlog", func() bool { return down.delivered("/erp") == total })
			down.checkOrder(t, "/erp")
			down.checkOrder(t, "/ledger")
			if st := a.c.route("orders", "erp"); st["paused"] != false {
				t.Errorf("erp on A after resume through B: %v", st)
			}
			waitFor(t, "an empty outbox", a.c.drained)
		})
	}
}

// Dead letters by the thousand go back through one admin call: a route
// whose downstream refused everything (400, max_attempts 1) dead-letters
// it all; once the downstream is fixed, a bulk retry counts every one,
// and all are delivered, each resource's in order.
func TestBulkRetryOfManyDeadLetters(t *testing.T) {
	for _, backend := range []string{"badger", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			const resources, perResource = 20, 100
			down, srv := newDownstream(t, http.StatusBadRequest)
			routes := `      - name: erp
        url: %s/erp
        max_attempts: 1
        breaker: { off: true }
`
			storage := fmt.Sprintf("data_dir: %q", filepath.Join(t.TempDir(), "data"))
			if backend == "postgres" {
				storage = pgStorage(t)
			}
			reps := startReplicas(t, 1, func(public, admin string) string {
				return protectConfig(storage, public, admin, srv.URL, routes)
			})
			c := reps[0].c
			total := postAll(t, reps, "events", resources, perResource)
			waitLong(t, "every request dead-lettered", func() bool {
				return c.route("events", "erp")["dead_letters"] == float64(total)
			})
			// A page of the list, and the next.
			status, body := c.adminCall(http.MethodGet, "/admin/deadletters?source=events&route=erp&limit=50")
			items, _ := body["items"].([]any)
			next, _ := body["next_cursor"].(string)
			if status != 200 || len(items) != 50 || next == "" {
				t.Fatalf("a page of 50 dead letters: %d, %d items, next %q", status, len(items), next)
			}
			first := requestIDsOf(items)
			second := requestIDsOf(c.items("/admin/deadletters?source=events&route=erp&limit=50&cursor=" + url.QueryEscape(next)))
			if len(second) != 50 || slices.Contains(first, second[0]) {
				t.Errorf("the second page %v repeats the first %v", second, first)
			}

			down.status.Store(http.StatusOK)
			status, body = c.adminCall(http.MethodPost, "/admin/deadletters/retry?source=events&route=erp")
			if status != 202 || body["retried"] != float64(total) || body["refused"] != 0.0 {
				t.Fatalf("bulk retry: %d %v, want all %d retried", status, body, total)
			}
			waitLong(t, "every retried request delivered", func() bool {
				return down.delivered("/erp") == total
			})
			down.checkOrder(t, "/erp")
			if n := len(c.items("/admin/deadletters")); n != 0 {
				t.Errorf("%d dead letters after the retry", n)
			}
			if got := c.search("/admin/receipts?source=events&route=erp&forward_state=delivered&limit=1000"); len(got) != total {
				t.Errorf("%d receipts say delivered on erp, want %d", len(got), total)
			}
			waitFor(t, "an empty outbox", c.drained)
		})
	}
}
