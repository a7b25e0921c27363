package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/postgres/pgtest"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/store/storetest"
)

var ctx = context.Background()

// replicas opens n stores on one schema, as n webhookd processes on one
// database.
func replicas(t *testing.T, n int) []*Store {
	t.Helper()
	dir := t.TempDir()
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = openTest(t, storetest.Config{Dir: dir})
	}
	return stores
}

// target is the route deliveries go to, unless a test names others.
var target = forward.Target{Source: "billing", Route: "default"}

func delivery(id, resource string, version uint64, body string) webhookd.Delivery {
	d := webhookd.Delivery{Source: "billing", RequestID: id, DeliveryID: "d-" + id, Resource: resource,
		Fingerprint: "sha-" + body, ReceivedAt: time.Now(), Forward: true, Routes: []string{target.Route}, Body: []byte(body)}
	if version > 0 {
		d.Version, d.VersionOrder = strconv.FormatUint(version, 10), version
	}
	return d
}

// TestReplicasAcceptOnce sends one request ID to three replicas at once:
// their batches race on the same row, and exactly one delivery is accepted.
func TestReplicasAcceptOnce(t *testing.T) {
	stores := replicas(t, 3)
	var accepted, duplicate atomic.Int32
	var wg sync.WaitGroup
	for i := range 150 {
		wg.Go(func() {
			d := delivery("req-1", "", 0, "same")
			d.DeliveryID = fmt.Sprint("d-", i)
			out, err := stores[i%3].Decide(ctx, d)
			switch {
			case err != nil:
				t.Error(err)
			case out.Decision == webhookd.Accepted:
				accepted.Add(1)
			case out.Decision == webhookd.Duplicate:
				duplicate.Add(1)
			}
		})
	}
	wg.Wait()
	if accepted.Load() != 1 || duplicate.Load() != 149 {
		t.Errorf("accepted %d, duplicate %d; want 1 and 149", accepted.Load(), duplicate.Load())
	}
	r, err := stores[0].Receipt(ctx, "billing", "req-1")
	if err != nil || r.Attempts != 150 {
		t.Errorf("receipt %+v, %v; want 150 deliveries counted", r, err)
	}
	if entries, _, _ := stores[1].Outbox(ctx, forward.Target{}, storage.Page{}); len(entries) != 1 {
		t.Errorf("outbox holds %d entries, want 1", len(entries))
	}
}

// TestReplicasNeverMoveBackwards sends versions of one resource to three
// replicas at once: the latest ends at the highest, and the accepted ones
// are the lane in version order.
func TestReplicasNeverMoveBackwards(t *testing.T) {
	stores := replicas(t, 3)
	var wg sync.WaitGroup
	for v := uint64(1); v <= 90; v++ {
		wg.Go(func() {
			if _, err := stores[v%3].Decide(ctx, delivery(fmt.Sprint("req-", v), "sub", v, fmt.Sprint(v))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	l, err := stores[2].Latest(ctx, "billing", "sub")
	if err != nil || l.Order != 90 {
		t.Fatalf("latest %+v, %v; want 90", l, err)
	}
	entries, _, _ := stores[0].Outbox(ctx, target, storage.Page{})
	last := uint64(0)
	for _, e := range entries {
		v, _ := strconv.ParseUint(e.Version, 10, 64)
		if v <= last {
			t.Errorf("outbox has version %d after %d", v, last)
		}
		last = v
	}
}

// TestVersionOrdersAcrossTheSignBit checks that unsigned orders above
// 1<<63, which timestamps after 1970 have, order after those below.
func TestVersionOrdersAcrossTheSignBit(t *testing.T) {
	s := openTest(t, storetest.Config{Dir: t.TempDir()})
	for i, v := range []uint64{1, 1 << 62, 1<<63 - 1, 1 << 63, 1<<63 + 1, math.MaxUint64 - 1} {
		out, err := s.Decide(ctx, delivery(fmt.Sprint("up-", i), "sub", v, fmt.Sprint(i)))
		if err != nil || out.Decision != webhookd.Accepted {
			t.Fatalf("order %d: %+v, %v; want accepted", v, out, err)
		}
	}
	out, err := s.Decide(ctx, delivery("down", "sub", 1<<63-1, "down"))
	if err != nil || out.Decision != webhookd.Stale {
		t.Errorf("order below the latest: %+v, %v; want stale", out, err)
	}
	if l, _ := s.Latest(ctx, "billing", "sub"); l.Order != math.MaxUint64-1 {
		t.Errorf("latest order %d", l.Order)
	}
}

// TestLeaseHoldsAcrossReplicas claims on one replica; the others get
// nothing until the lease ends.
func TestLeaseHoldsAcrossReplicas(t *testing.T) {
	clock := storetest.NewClock()
	dir := t.TempDir()
	a := openTest(t, storetest.Config{Dir: dir, Now: clock.Now})
	b := openTest(t, storetest.Config{Dir: dir, Now: clock.Now})
	d := delivery("req-1", "sub", 1, "1")
	d.ReceivedAt = clock.Now()
	if _, err := a.Decide(ctx, d); err != nil {
		t.Fatal(err)
	}
	claims, err := a.Claim(ctx, "a", target, 5, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("a claimed %+v, %v", claims, err)
	}
	if got, err := b.Claim(ctx, "b", target, 5, time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("b claimed %+v, %v within a's lease", got, err)
	}
	clock.Advance(time.Minute)
	got, err := b.Claim(ctx, "b", target, 5, time.Minute)
	if err != nil || len(got) != 1 {
		t.Fatalf("after the lease, b claimed %+v, %v", got, err)
	}
	res := forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: clock.Now()}
	if err := a.Settle(ctx, claims[0], res); !errors.Is(err, forward.ErrLeaseLost) {
		t.Errorf("a settles after b took over: %v, want ErrLeaseLost", err)
	}
	if err := b.Settle(ctx, got[0], res); err != nil {
		t.Fatal(err)
	}
}

// TestReplicasMigrateTogether opens replicas on an empty schema at once:
// one migrates, the others wait for it and find the work done.
func TestReplicasMigrateTogether(t *testing.T) {
	dsn := pgtest.SchemaDSN(t, t.Name())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s := New(dsn)
			s.Logger = zaptest.NewLogger(t)
			if err := s.Open(ctx); err != nil {
				t.Error(err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
}

// TestNewerSchemaRefused opens a database a newer webhookd migrated.
func TestNewerSchemaRefused(t *testing.T) {
	dsn := pgtest.SchemaDSN(t, t.Name())
	s := New(dsn)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE webhookd_schema SET version = version + 1`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	err := New(dsn).Open(ctx)
	if !errors.Is(err, ErrSchemaNewer) || webhookd.ErrorField(err) != "storage.dsn" {
		t.Errorf("Open on a newer schema: %v, want ErrSchemaNewer naming storage.dsn", err)
	}
}

// TestUnreachableDatabase opens on a port where nothing listens, then
// loses the database under an open store.
func TestUnreachableDatabase(t *testing.T) {
	err := New("postgres://postgres@127.0.0.1:1/test?connect_timeout=2").Open(ctx)
	if webhookd.ErrorField(err) != "storage.dsn" || webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Errorf("Open on a closed port: %v, want unavailable naming storage.dsn", err)
	}
	err = New("postgres://postgres@127.0.0.1:5432/test?sslmode=bogus").Open(ctx)
	if webhookd.ErrorField(err) != "storage.dsn" || webhookd.ErrorCode(err) != webhookd.EINVALID {
		t.Errorf("Open on a malformed DSN: %v, want invalid naming storage.dsn", err)
	}

	// The store reaches the database through a proxy, which the test
	// stops as a network failure or a database restart would.
	target := pgtest.HostPort(t)
	p := startProxy(t, "127.0.0.1:0", target)
	dsn := pgtest.SchemaDSN(t, t.Name())
	s := New(strings.Replace(dsn, target, p.addr, 1))
	s.Logger, s.HealthInterval = zaptest.NewLogger(t), 50*time.Millisecond
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Decide(ctx, delivery("req-1", "", 0, "x")); err != nil {
		t.Fatal(err)
	}
	p.stop()
	if _, err := s.Decide(ctx, delivery("req-2", "", 0, "x")); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Errorf("Decide without a database: %v, want unavailable", err)
	}
	if err := s.Ready(); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Errorf("Ready without a database: %v, want unavailable", err)
	}
	startProxy(t, p.addr, target)
	deadline := time.Now().Add(10 * time.Second)
	for s.Ready() != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready once the database is back: %v", err)
	}
	if out, err := s.Decide(ctx, delivery("req-2", "", 0, "x")); err != nil || out.Decision != webhookd.Accepted {
		t.Errorf("Decide once the database is back: %+v, %v; want accepted, as nothing was written", out, err)
	}
}

type proxy struct {
	addr  string
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// startProxy relays connections on addr to target until stop.
func startProxy(t *testing.T, addr, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: ln.Addr().String(), ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(up, c); up.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *proxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// TestExpireDeletesInBatches expires more receipts than one statement
// deletes.
func TestExpireDeletesInBatches(t *testing.T) {
	clock := storetest.NewClock()
	s := openTest(t, storetest.Config{Dir: t.TempDir(), Now: clock.Now, ReceiptTTL: time.Hour})
	s.ExpiryBatch = 7
	for i := range 30 {
		d := delivery(fmt.Sprint("req-", i), "", 0, "x")
		d.ReceivedAt = clock.Now()
		if _, err := s.Decide(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	count := func(table string) (n int) {
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := s.Expire(ctx); err != nil || count("webhookd_receipts") != 30 {
		t.Fatalf("before the TTL: %v, %d receipts left", err, count("webhookd_receipts"))
	}
	clock.Advance(time.Hour)
	if err := s.Expire(ctx); err != nil {
		t.Fatal(err)
	}
	if r, p := count("webhookd_receipts"), count("webhookd_payloads"); r != 0 || p != 0 {
		t.Errorf("after the TTL: %d receipts, %d payloads left", r, p)
	}
	if count("webhookd_outbox") != 30 {
		t.Error("expiry deleted outbox entries")
	}
}

// TestExpireOnTwoReplicasAtOnce runs the expiry job on two replicas
// together: they skip each other's rows, and between them delete all.
func TestExpireOnTwoReplicasAtOnce(t *testing.T) {
	clock := storetest.NewClock()
	dir := t.TempDir()
	a := openTest(t, storetest.Config{Dir: dir, Now: clock.Now, ReceiptTTL: time.Hour})
	b := openTest(t, storetest.Config{Dir: dir, Now: clock.Now, ReceiptTTL: time.Hour})
	a.ExpiryBatch, b.ExpiryBatch = 5, 5
	for i := range 60 {
		d := delivery(fmt.Sprint("req-", i), "", 0, "x")
		d.ReceivedAt = clock.Now()
		if _, err := a.Decide(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Hour)
	var wg sync.WaitGroup
	for _, s := range []*Store{a, b} {
		wg.Go(func() {
			if err := s.Expire(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var n int
	if err := a.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhookd_receipts) + (SELECT count(*) FROM webhookd_payloads)`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d receipts and payloads left, %v", n, err)
	}
}

// TestStatementTimeout checks every connection runs with the store's
// statement timeout.
func TestStatementTimeout(t *testing.T) {
	s := New(pgtest.SchemaDSN(t, t.Name()))
	s.StatementTimeout = 1500 * time.Millisecond
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var timeout string
	if err := s.pool.QueryRow(ctx, `SHOW statement_timeout`).Scan(&timeout); err != nil || timeout != "1500ms" {
		t.Errorf("statement_timeout %q, %v; want 1500ms", timeout, err)
	}
	_, err := s.pool.Exec(ctx, `SELECT pg_sleep(3)`)
	if err == nil || unreachable(err) {
		t.Errorf("a statement past the timeout: %v, want it cancelled, the database still reachable", err)
	}
}

func TestErrorClasses(t *testing.T) {
	for _, tt := range []struct {
		err                    error
		retryable, unreachable bool
	}{
		{errConflict, true, false},
		{fmt.Errorf("batch: %w", &pgconn.PgError{Code: "40P01"}), true, false},
		{&pgconn.PgError{Code: "40001"}, true, false},
		{&pgconn.PgError{Code: "23505"}, false, false},
		{&pgconn.PgError{Code: "57014"}, false, false}, // statement timeout
		{&pgconn.PgError{Code: "57P01"}, false, true},  // admin shutdown
		{&pgconn.PgError{Code: "08006"}, false, true},
		{errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"), false, true},
	} {
		if got := retryable(tt.err); got != tt.retryable {
			t.Errorf("retryable(%v) = %v", tt.err, got)
		}
		if got := unreachable(tt.err); got != tt.unreachable {
			t.Errorf("unreachable(%v) = %v", tt.err, got)
		}
	}
}

// A writer that was busy waits for more operations, up to a full batch;
// one that was idle takes what waits and goes.
func TestCollect(t *testing.T) {
	ch := make(chan int, 8)
	ch <- 2
	if got := collect(ch, []int{1}, 4, false, time.Hour); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("idle: %v, want what was waiting", got)
	}
	go func() {
		for i := 2; i <= 4; i++ {
			ch <- i
		}
	}()
	if got := collect(ch, []int{1}, 4, true, time.Hour); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Errorf("busy: %v, want a full batch", got)
	}
	if got := collect(ch, []int{1}, 4, true, time.Millisecond); !slices.Equal(got, []int{1}) {
		t.Errorf("busy, nothing more came: %v", got)
	}
}

// TestRouteStatusesSettledOnReplicasAtOnce forwards requests to three
// routes, each route's entries claimed and settled by a replica of its
// own, all at once: settles of one receipt's routes race on its row, and
// each keeps the others' statuses and tokens.
func TestRouteStatusesSettledOnReplicasAtOnce(t *testing.T) {
	stores := replicas(t, 3)
	routes := []string{"a", "b", "c"}
	const requests = 40
	for i := range requests {
		d := delivery(fmt.Sprint("req-", i), fmt.Sprint("sub-", i), 1, "x")
		d.Routes = routes
		if _, err := stores[0].Decide(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	settledClaims := make([][]forward.Claim, len(routes))
	var wg sync.WaitGroup
	for i, route := range routes {
		wg.Go(func() {
			s, to := stores[i], forward.Target{Source: "billing", Route: route}
			for len(settledClaims[i]) < requests {
				claims, err := s.Claim(ctx, route, to, 8, time.Minute)
				if err != nil || len(claims) == 0 {
					t.Errorf("claim on %s: %d claims, %v", route, len(claims), err)
					return
				}
				for _, c := range claims {
					res := forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200 + i, At: time.Now()}
					if err := s.Settle(ctx, c, res); err != nil {
						t.Errorf("settle %s: %v", c.Target(), err)
						return
					}
				}
				settledClaims[i] = append(settledClaims[i], claims...)
			}
		})
	}
	wg.Wait()
	for i := range requests {
		r, err := stores[1].Receipt(ctx, "billing", fmt.Sprint("req-", i))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Routes) != len(routes) {
			t.Fatalf("%s: routes %+v", r.RequestID, r.Routes)
		}
		for j, rs := range r.Routes {
			if rs.Route != routes[j] || rs.State != webhookd.ForwardDelivered || rs.LastStatus != 200+j {
				t.Errorf("%s: route %d is %+v, want %s delivered with status %d", r.RequestID, j, rs, routes[j], 200+j)
			}
		}
	}
	// Each claim is known as settled by the token its route's status
	// kept, whichever route's settle wrote the row last.
	for i, claims := range settledClaims {
		for _, c := range claims {
			res := forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200 + i, At: time.Now()}
			if err := stores[2].Settle(ctx, c, res); err != nil {
				t.Errorf("settling %s/%s again: %v, want nil", c.Target(), c.RequestID, err)
			}
		}
	}
}

// TestExpiredReceiptReplacedWithItsRoutes decides a request ID again past
// its receipt's TTL, matching other routes: the new receipt's statuses
// are the new routes', none of the old receipt's.
func TestExpiredReceiptReplacedWithItsRoutes(t *testing.T) {
	clock := storetest.NewClock()
	s := openTest(t, storetest.Config{Dir: t.TempDir(), Now: clock.Now, ReceiptTTL: time.Hour})
	d := delivery("req-1", "", 0, "x")
	d.ReceivedAt, d.Routes = clock.Now(), []string{"a", "b"}
	if _, err := s.Decide(ctx, d); err != nil {
		t.Fatal(err)
	}
	claims, err := s.Claim(ctx, "w", forward.Target{Source: "billing", Route: "a"}, 1, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claimed %+v, %v", claims, err)
	}
	if err := s.Settle(ctx, claims[0], forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	d.ReceivedAt, d.Routes = clock.Now(), []string{"c", "a"}
	if out, err := s.Decide(ctx, d); err != nil || out.Decision != webhookd.Accepted {
		t.Fatalf("past the TTL: %+v, %v; want accepted", out, err)
	}
	r, err := s.Receipt(ctx, "billing", "req-1")
	if err != nil {
		t.Fatal(err)
	}
	pending := webhookd.ForwardStatus{State: webhookd.ForwardPending}
	want := []webhookd.RouteStatus{{Route: "c", ForwardStatus: pending}, {Route: "a", ForwardStatus: pending}}
	if !slices.Equal(r.Routes, want) || r.Unrouted {
		t.Errorf("routes %+v, unrouted %v; want c and a pending", r.Routes, r.Unrouted)
	}
	d.RequestID, d.Routes = "req-2", nil
	if _, err := s.Decide(ctx, d); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Receipt(ctx, "billing", "req-2"); err != nil || !r.Unrouted || len(r.Routes) != 0 {
		t.Errorf("a delivery that matched no route: %+v, %v; want it routed nowhere", r, err)
	}
}
