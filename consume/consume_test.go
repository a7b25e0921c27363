package consume_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookd/webhookd/consume"
	"github.com/webhookd/webhookd/signature"
	"github.com/webhookd/webhookd/versioning"
)

// quiet drops the handler's logs of the failures the tests cause.
var quiet = slog.New(slog.DiscardHandler)

// request is one forwarded request, as webhookd sends it.
type request struct {
	key, resource, version string
	attempt                int
	body                   string
	header                 map[string]string
}

func post(t testing.TB, url string, r request) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.key != "" {
		req.Header.Set("Idempotency-Key", r.key)
	}
	req.Header.Set("Webhook-Source", "shop")
	req.Header.Set("Webhook-Route", "default")
	req.Header.Set("Webhook-Attempt", strconv.Itoa(max(r.attempt, 1)))
	if r.resource != "" {
		req.Header.Set("Webhook-Resource", r.resource)
		req.Header.Set("Webhook-Version", r.version)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get(consume.DecisionHeader)
}

func serve(t testing.TB, c *consume.Consumer, apply consume.ApplyFunc) string {
	t.Helper()
	srv := httptest.NewServer(c.Handler(apply))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestConcurrentDeliveriesOfOneKeyApplyOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		c := tdb.consumer(t, consume.Config{Log: quiet})
		url := serve(t, c, tdb.record)
		const n = 200
		var wg sync.WaitGroup
		statuses := make([]int, n)
		decisions := make([]string, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				statuses[i], decisions[i] = post(t, url, request{key: "evt_1", attempt: i + 1, body: `{}`})
			})
		}
		close(start)
		wg.Wait()
		count := map[string]int{}
		for i := range n {
			if statuses[i] != http.StatusOK {
				t.Fatalf("request %d answered %d", i, statuses[i])
			}
			count[decisions[i]]++
		}
		if count["applied"] != 1 || count["duplicate"] != n-1 {
			t.Fatalf("decisions %v, want 1 applied and %d duplicate", count, n-1)
		}
		if got := tdb.applied(t, "evt_1"); got != 1 {
			t.Fatalf("applied %d times", got)
		}
	})
}

func TestFailedApplyRecordsNothingAndTheRetryApplies(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		c := tdb.consumer(t, consume.Config{Log: quiet})
		var fail atomic.Bool
		fail.Store(true)
		url := serve(t, c, func(ctx context.Context, tx *sql.Tx, d consume.Delivery) error {
			if err := tdb.record(ctx, tx, d); err != nil {
				return err
			}
			if fail.Load() {
				return errors.New("inventory locked")
			}
			return nil
		})
		if status, _ := post(t, url, request{key: "evt_1", body: `{}`}); status != http.StatusInternalServerError {
			t.Fatalf("failed apply answered %d, want 500", status)
		}
		if _, err := c.Lookup(context.Background(), consume.HTTPConsumer("shop", "default"), "evt_1"); !errors.Is(err, consume.ErrNotFound) {
			t.Fatalf("key after a failed apply: %v, want ErrNotFound", err)
		}
		if got := tdb.applied(t, "evt_1"); got != 0 {
			t.Fatalf("failed apply left %d effects", got)
		}
		fail.Store(false)
		if status, decision := post(t, url, request{key: "evt_1", attempt: 2, body: `{}`}); status != http.StatusOK || decision != "applied" {
			t.Fatalf("retry answered %d %q", status, decision)
		}
		if got := tdb.applied(t, "evt_1"); got != 1 {
			t.Fatalf("applied %d times", got)
		}
		rec, err := c.Lookup(context.Background(), "shop/default", "evt_1")
		if err != nil || rec.Attempt != 2 || rec.Decision != consume.Applied {
			t.Fatalf("record %+v, %v", rec, err)
		}
	})
}

func TestPermanentErrorIs4xxAndRecordsNothing(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		c := tdb.consumer(t, consume.Config{Log: quiet})
		url := serve(t, c, func(ctx context.Context, tx *sql.Tx, d consume.Delivery) error {
			if err := tdb.record(ctx, tx, d); err != nil {
				return err
			}
			return fmt.Errorf("sku: %w", consume.Permanent(errors.New("unknown SKU")))
		})
		if status, _ := post(t, url, request{key: "evt_1", body: `{}`}); status != http.StatusUnprocessableEntity {
			t.Fatalf("permanent error answered %d, want 422", status)
		}
		if _, err := c.Lookup(context.Background(), "shop/default", "evt_1"); !errors.Is(err, consume.ErrNotFound) {
			t.Fatalf("key after a permanent error: %v, want ErrNotFound", err)
		}
		if got := tdb.applied(t, "evt_1"); got != 0 {
			t.Fatalf("permanent error left %d effects", got)
		}
	})
}

func TestPanicRollsBack(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		c := tdb.consumer(t, consume.Config{Log: quiet})
		var panics atomic.Bool
		panics.Store(true)
		url := serve(t, c, func(ctx context.Context, tx *sql.Tx, d consume.Delivery) error {
			if err := tdb.record(ctx, tx, d); err != nil {
				return err
			}
			if panics.Load() {
				panic("nil map")
			}
			return nil
		})
		if status, _ := post(t, url, request{key: "evt_1", body: `{}`}); status != http.StatusInternalServerError {
			t.Fatalf("panic answered %d, want 500", status)
		}
		if got := tdb.applied(t, "evt_1"); got != 0 {
			t.Fatalf("panic left %d effects", got)
		}
		panics.Store(false)
		if status, decision := post(t, url, request{key: "evt_1", body: `{}`}); status != http.StatusOK || decision != "applied" {
			t.Fatalf("retry after a panic answered %d %q", status, decision)
		}
		if got := tdb.applied(t, "evt_1"); got != 1 {
			t.Fatalf("applied %d times", got)
		}
	})
}

func TestApplyPanicGoesOnAfterTheRollback(t *testing.T) {
	tdb := openDB(t, consume.SQLite)
	c := tdb.consumer(t, consume.Config{})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Apply swallowed the panic")
			}
		}()
		c.Apply(context.Background(), "worker", consume.Delivery{Key: "m1"}, func(ctx context.Context, tx *sql.Tx, d consume.Delivery) error {
			tdb.record(ctx, tx, d)
			panic("boom")
		})
	}()
	if got := tdb.applied(t, "m1"); got != 0 {
		t.Fatalf("panic left %d effects", got)
	}
	if _, err := c.Lookup(context.Background(), "worker", "m1"); !errors.Is(err, consume.ErrNotFound) {
		t.Fatalf("key after a panic: %v", err)
	}
}

func TestStaleGuard(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		c := tdb.consumer(t, consume.Config{Versions: versioning.Integer, Log: quiet})
		url := serve(t, c, tdb.record)
		for _, step := range []struct {
			key, resource, version, want string
		}{
			{"e2", "sku-1", "2", "applied"},
			{"e1", "sku-1", "1", "stale"},     // older
			{"e2b", "sku-1", "2", "stale"},    // equal
			{"e10", "sku-1", "10", "applied"}, // 10 > 2 as numbers, not as text
			{"o1", "sku-2", "1", "applied"},   // another resource has its own latest
			{"e1", "sku-1", "1", "duplicate"}, // the stale key is recorded
		} {
			status, decision := post(t, url, request{key: step.key, resource: step.resource, version: step.version, body: `{}`})
			if status != http.StatusOK || decision != step.want {
				t.Fatalf("%s (%s v%s) answered %d %q, want 200 %q", step.key, step.resource, step.version, status, decision, step.want)
			}
		}
		for key, want := range map[string]int{"e2": 1, "e1": 0, "e2b": 0, "e10": 1, "o1": 1} {
			if got := tdb.applied(t, key); got != want {
				t.Errorf("%s applied %d times, want %d", key, got, want)
			}
		}
		rec, err := c.Lookup(context.Background(), "shop/default", "e1")
		if err != nil || rec.Decision != consume.Stale {
			t.Fatalf("stale record %+v, %v", rec, err)
		}
		if status, _ := post(t, url, request{key: "bad", resource: "sku-1", version: "v3", body: `{}`}); status != http.StatusUnprocessableEntity {
			t.Fatalf("a version not in the format answered %d, want 422", status)
		}
	})
}

func TestConcurrentVersionsApplyOnlyNewer(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		c := tdb.consumer(t, consume.Config{Versions: versioning.Integer, Log: quiet})
		url := serve(t, c, tdb.record)
		const n = 40
		var wg sync.WaitGroup
		decisions := make([]string, n+1)
		for v := 1; v <= n; v++ {
			wg.Go(func() {
				status, decision := post(t, url, request{key: fmt.Sprint("v", v), resource: "sku-1", version: strconv.Itoa(v), body: `{}`})
				if status != http.StatusOK {
					t.Errorf("v%d answered %d", v, status)
				}
				decisions[v] = decision
			})
		}
		wg.Wait()
		// Whatever order they ran in, the newest is applied: it can be
		// stale to nothing.
		if decisions[n] != "applied" {
			t.Fatalf("the newest version was %q", decisions[n])
		}
		for v := 1; v <= n; v++ {
			want := 0
			if decisions[v] == "applied" {
				want = 1
			}
			if got := tdb.applied(t, fmt.Sprint("v", v)); got != want {
				t.Fatalf("v%d (%s) applied %d times", v, decisions[v], got)
			}
		}
	})
}

func TestSignature(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		old, current := "whsec_"+b64("old secret, still accepted"), "whsec_"+b64("current secret")
		now := time.Now()
		c := tdb.consumer(t, consume.Config{Secrets: []string{current, old}, Now: func() time.Time { return now }, Log: quiet})
		url := serve(t, c, tdb.record)
		signed := func(secret, key string, at time.Time, body string) request {
			h, err := signature.SignStandard(secret, key, at, []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			return request{key: key, body: body, header: h}
		}
		body := `{"sku":"A","qty":3}`
		for _, step := range []struct {
			name string
			r    request
			want int
		}{
			{"unsigned", request{key: "k1", body: body}, http.StatusUnauthorized},
			{"wrong secret", signed("whsec_"+b64("someone else"), "k2", now, body), http.StatusUnauthorized},
			{"too old", signed(current, "k3", now.Add(-10*time.Minute), body), http.StatusUnauthorized},
			{"body changed", func() request { r := signed(current, "k4", now, body); r.body = `{"sku":"A","qty":30}`; return r }(), http.StatusUnauthorized},
			{"current secret", signed(current, "k5", now, body), http.StatusOK},
			{"rotated-out secret", signed(old, "k6", now, body), http.StatusOK},
		} {
			if status, _ := post(t, url, step.r); status != step.want {
				t.Errorf("%s: answered %d, want %d", step.name, status, step.want)
			}
			want := 0
			if step.want == http.StatusOK {
				want = 1
			}
			if got := tdb.applied(t, step.r.key); got != want {
				t.Errorf("%s: applied %d times, want %d", step.name, got, want)
			}
		}
	})
}

func TestMissingKeyIs400(t *testing.T) {
	tdb := openDB(t, consume.SQLite)
	c := tdb.consumer(t, consume.Config{})
	called := false
	url := serve(t, c, func(context.Context, *sql.Tx, consume.Delivery) error { called = true; return nil })
	if status, _ := post(t, url, request{body: `{}`}); status != http.StatusBadRequest {
		t.Fatalf("no Idempotency-Key answered %d, want 400", status)
	}
	if called {
		t.Fatal("apply was called")
	}
}

func TestQueueConsumersEachApplyOnceWithEvidence(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		c := tdb.consumer(t, consume.Config{Versions: versioning.Integer, Now: func() time.Time { return at }})
		ctx := context.Background()
		msg := consume.Delivery{Key: "order-42", Source: "orders", Resource: "order-42", Version: "7", Attempt: 3, Body: []byte(`{}`)}
		for _, consumer := range []string{"billing", "shipping", "billing", "shipping"} {
			if _, err := c.Apply(ctx, consumer, msg, tdb.record); err != nil {
				t.Fatal(err)
			}
		}
		if got := tdb.applied(t, "order-42"); got != 2 {
			t.Fatalf("two consumers applied %d times in all, want 2", got)
		}
		decision, err := c.Apply(ctx, "billing", msg, func(context.Context, *sql.Tx, consume.Delivery) error {
			t.Fatal("apply called for a duplicate")
			return nil
		})
		if err != nil || decision != consume.Duplicate {
			t.Fatalf("third delivery: %q, %v", decision, err)
		}
		rec, err := c.Lookup(ctx, "shipping", "order-42")
		if err != nil {
			t.Fatal(err)
		}
		want := consume.Record{Consumer: "shipping", Key: "order-42", Source: "orders", Resource: "order-42", Version: "7", Attempt: 3, Decision: consume.Applied, At: at}
		rec.Risks, want.Risks = nil, nil
		if fmt.Sprint(rec) != fmt.Sprint(want) {
			t.Fatalf("record\n%+v, want\n%+v", rec, want)
		}
		rec, _ = c.Lookup(ctx, "shipping", "order-42")
		if len(rec.Risks) == 0 || !strings.Contains(rec.Risks[0], "outside the transaction") {
			t.Fatalf("risks %q", rec.Risks)
		}
	})
}

func TestCleanupInBatches(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		var now atomic.Int64
		start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		now.Store(start.UnixMicro())
		c := tdb.consumer(t, consume.Config{Versions: versioning.Integer, Now: func() time.Time { return time.UnixMicro(now.Load()) }})
		ctx := context.Background()
		apply := func(key string) consume.Decision {
			d, err := c.Apply(ctx, "w", consume.Delivery{Key: key, Source: "s", Resource: key, Version: "1"}, tdb.record)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		for i := range 23 {
			apply(fmt.Sprint("old-", i))
		}
		now.Store(start.Add(2 * time.Hour).UnixMicro())
		for i := range 4 {
			apply(fmt.Sprint("new-", i))
		}
		now.Store(start.Add(150 * time.Minute).UnixMicro())
		deleted, err := c.Cleanup(ctx, time.Hour, 5)
		if err != nil || deleted != 23 {
			t.Fatalf("cleanup deleted %d, %v; want 23", deleted, err)
		}
		var left int
		tdb.db.QueryRow("SELECT COUNT(*) FROM " + tdb.table).Scan(&left)
		if left != 4 {
			t.Fatalf("%d keys left, want 4", left)
		}
		if apply("new-0") != consume.Duplicate {
			t.Fatal("a key within the retention was forgotten")
		}
		// A key past the retention is forgotten, and applies again: what
		// the retention's lower bound in docs/consumer.md is for.
		if apply("old-0") != consume.Applied {
			t.Fatal("a key past the retention was not forgotten")
		}
		if deleted, err := c.Cleanup(ctx, time.Hour, 5); err != nil || deleted != 0 {
			t.Fatalf("second cleanup deleted %d, %v", deleted, err)
		}
	})
}

func TestSchemaIsPrintableAndCreatedTwice(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		c := tdb.consumer(t, consume.Config{})
		if err := c.CreateSchema(context.Background()); err != nil {
			t.Fatalf("second CreateSchema: %v", err)
		}
		schema := c.Schema()
		for _, want := range []string{"CREATE TABLE IF NOT EXISTS " + tdb.table + " (", "PRIMARY KEY (consumer, idempotency_key)", tdb.table + "_versions"} {
			if !strings.Contains(schema, want) {
				t.Errorf("schema lacks %q:\n%s", want, schema)
			}
		}
		// The printed SQL is what CreateSchema runs: a fresh table set
		// made from it works.
		other := openDB(t, tdb.dialect)
		for _, stmt := range strings.Split(strings.ReplaceAll(schema, tdb.table, other.table), ";\n\n") {
			other.exec(t, strings.TrimSuffix(strings.TrimSpace(stmt), ";"))
		}
		o, err := consume.New(consume.Config{DB: other.db, Dialect: other.dialect, Table: other.table})
		if err != nil {
			t.Fatal(err)
		}
		if d, err := o.Apply(context.Background(), "w", consume.Delivery{Key: "k"}, other.record); err != nil || d != consume.Applied {
			t.Fatalf("on the printed schema: %q, %v", d, err)
		}
	})
}

func TestNewRefuses(t *testing.T) {
	db := openDB(t, consume.SQLite).db
	for _, cfg := range []consume.Config{
		{Dialect: consume.SQLite},
		{DB: db},
		{DB: db, Dialect: consume.SQLite, Table: "t; DROP TABLE x"},
		{DB: db, Dialect: consume.SQLite, Versions: "semver"},
		{DB: db, Dialect: consume.SQLite, Secrets: []string{"not-base64!"}},
	} {
		if _, err := consume.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestImportGraph keeps the package importable on its own: a service
// takes net/http, database/sql and the signature check, none of the
// gateway's storage or HTTP stack, and no database driver it did not
// choose.
func TestImportGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	for _, want := range []string{"net/http", "database/sql", "github.com/webhookd/webhookd/signature"} {
		if !deps[want] {
			t.Errorf("does not import %s", want)
		}
	}
	for p := range deps {
		for _, banned := range []string{"badger", "fiber", "fasthttp", "pgx", "go-sql-driver", "sqlite", "zap", "prometheus"} {
			if strings.Contains(p, banned) {
				t.Errorf("imports %s", p)
			}
		}
	}
	var b bytes.Buffer
	for p := range deps {
		if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") && !strings.HasPrefix(p, "github.com/webhookd/webhookd/") {
			b.WriteString(p + " ")
		}
	}
	if b.Len() > 0 {
		t.Errorf("imports modules beyond the standard library and webhookd: %s", b.String())
	}
}

// TestLongestValues stores webhookd's longest request IDs, resources and
// versions, and refuses longer ones for good rather than truncate them
// into another key.
func TestLongestValues(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		c := tdb.consumer(t, consume.Config{Versions: versioning.Integer})
		ctx := context.Background()
		long := strings.Repeat("é", consume.MaxValue/2)
		d := consume.Delivery{Key: long, Source: strings.Repeat("s", consume.MaxName), Route: strings.Repeat("r", consume.MaxName),
			Resource: long, Version: strings.Repeat("9", 19)}
		if decision, err := c.Apply(ctx, long, d, tdb.record); err != nil || decision != consume.Applied {
			t.Fatalf("longest values: %q, %v", decision, err)
		}
		rec, err := c.Lookup(ctx, long, long)
		if err != nil || rec.Key != long || rec.Resource != long {
			t.Fatalf("longest values read back as %+v, %v", rec, err)
		}
		d.Key += "x"
		if _, err := c.Apply(ctx, "w", d, tdb.record); !consume.IsPermanent(err) {
			t.Fatalf("a key over %d bytes: %v, want a permanent error", consume.MaxValue, err)
		}
		if got := tdb.applied(t, d.Key); got != 0 {
			t.Fatalf("refused key applied %d times", got)
		}
	})
}

// TestConcurrentCopiesWithFailures sends one key many times at once to an
// apply that fails every other call: whatever fails and whatever waits on
// a rolled-back key, once every copy has been answered 200 (failures sent
// again, as webhookd does), the key is applied exactly once.
func TestConcurrentCopiesWithFailures(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb *testDB) {
		c := tdb.consumer(t, consume.Config{Log: quiet})
		var calls atomic.Int64
		url := serve(t, c, func(ctx context.Context, tx *sql.Tx, d consume.Delivery) error {
			if err := tdb.record(ctx, tx, d); err != nil {
				return err
			}
			if calls.Add(1)%2 == 1 {
				return errors.New("try again")
			}
			return nil
		})
		const n = 60
		var wg sync.WaitGroup
		var applied atomic.Int64
		for i := range n {
			wg.Go(func() {
				for attempt := 1; attempt <= 100; attempt++ {
					status, decision := post(t, url, request{key: "evt_1", attempt: attempt, body: fmt.Sprint(i)})
					if status == http.StatusOK {
						if decision == "applied" {
							applied.Add(1)
						}
						return
					}
					if status != http.StatusInternalServerError {
						t.Errorf("answered %d", status)
						return
					}
				}
				t.Error("100 attempts and not applied")
			})
		}
		wg.Wait()
		if applied.Load() != 1 {
			t.Fatalf("%d copies answered applied, want 1", applied.Load())
		}
		if got := tdb.applied(t, "evt_1"); got != 1 {
			t.Fatalf("applied %d times", got)
		}
	})
}
