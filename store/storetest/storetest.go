// Package storetest is the conformance suite of webhookd's storage
// contract, storage.Backend: every backend's tests call Run, and a backend
// is correct when it passes. It checks what the gateway, the admin API,
// the console and the forwarder rely on, through the contract only.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/versioning"
)

// Config is what a test asks of the backend it opens.
type Config struct {
	// Dir names the backend's data: a fresh directory for each test, the
	// same one to open again what a closed backend wrote. A backend that
	// keeps its data elsewhere derives its database or schema from it.
	Dir        string
	Now        func() time.Time // the backend's clock
	ReceiptTTL time.Duration
	// FailCommit, when set and returning true, makes the backend fail the
	// commit it is about to make, as a full disk or a lost database does.
	FailCommit func() bool
}

// Open opens a backend on c; it closes it when the test ends.
type Open func(t *testing.T, c Config) storage.Backend

// Run runs the suite against the backends open returns.
func Run(t *testing.T, open Open) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, open Open)
	}{
		{"DecisionMatrix", testDecisionMatrix},
		{"ConcurrentDeliveriesAcceptOnce", testConcurrentDeliveriesAcceptOnce},
		{"ConcurrentVersionsNeverMoveBackwards", testConcurrentVersions},
		{"TiesWhereTheSourceAcceptsThem", testTies},
		{"Readiness", testReadiness},
		{"FailedCommitWritesNothing", testFailedCommitWritesNothing},
		{"ReceiptsExpire", testReceiptsExpire},
		{"LaneOrderAndHeadOnlyClaims", testLanes},
		{"LeaseExpiryAndReclaim", testLeaseExpiry},
		{"SettleIsIdempotent", testSettleIdempotent},
		{"PayloadGoneIsDeadLettered", testPayloadGone},
		{"PayloadExpiresWhileWaiting", testPayloadExpiresWhileWaiting},
		{"CountsByTarget", testCountsByTarget},
		{"CountsStayExact", testCountsStayExact},
		{"NotifiedOfNewEntries", testNotify},
		{"RedeliverRetryDiscard", testRepairs},
		{"DurableAcrossReopen", testDurable},
		{"TwoForwarders", testTwoForwarders},
		{"FanOutInTheDecisionsTransaction", testFanOut},
		{"RouteStatusesSettleApart", testRouteStatuses},
		{"UnroutedIsAcceptedWithoutEntries", testUnrouted},
		{"LanesPerRoute", testLanesPerRoute},
		{"DeadLetterOfOneRouteBlocksNoOther", testDeadLetterPerRoute},
		{"SupersedePerRoute", testSupersedePerRoute},
		{"ListsByTarget", testListsByTarget},
		{"RetryAndDiscardByRoute", testRepairsByRoute},
		{"RedeliverPerRoute", testRedeliverPerRoute},
		{"RateSharedByOwners", testRateSharedByOwners},
		{"BreakerSharedByOwners", testBreakerSharedByOwners},
		{"PausePersists", testPausePersists},
		{"ReceiptSearch", testReceiptSearch},
		{"ReceiptSearchAtScale", testReceiptSearchAtScale},
		{"ListPages", testListPages},
		{"BulkRepairs", testBulkRepairs},
		{"BulkRetryAtScale", testBulkRetryAtScale},
		{"TraceContextKept", testTraceKept},
	} {
		// Each case opens backends on directories of its own, which a
		// backend that keeps its data elsewhere maps to a database or
		// schema of their own, so the cases run side by side.
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t, open)
		})
	}
}

// Clock is a clock a test moves by hand.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at a whole second.
func NewClock() *Clock { return &Clock{now: time.Now().Truncate(time.Second).Add(time.Hour)} }

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var ctx = context.Background()

// source forwards to route unless a test names its routes: the cases
// that are not about routes have one.
const (
	source = "billing"
	route  = "ledger"
)

var target = forward.Target{Source: source, Route: route}

type fixture struct {
	t     *testing.T
	open  Open
	cfg   Config
	clock *Clock
	b     storage.Backend
}

func newFixture(t *testing.T, open Open) *fixture {
	f := &fixture{t: t, open: open, clock: NewClock()}
	f.cfg = Config{Dir: t.TempDir(), Now: f.clock.Now, ReceiptTTL: time.Hour}
	f.b = open(t, f.cfg)
	return f
}

func (f *fixture) reopen() {
	f.t.Helper()
	if err := f.b.Close(); err != nil {
		f.t.Fatal(err)
	}
	f.b = f.open(f.t, f.cfg)
}

// delivery is a delivery of requestID forwarded to route; version 0 is
// none.
func (f *fixture) delivery(requestID, resource string, version uint64, body string) webhookd.Delivery {
	d := webhookd.Delivery{
		Source: source, RequestID: requestID, DeliveryID: "d-" + requestID, Resource: resource,
		Fingerprint: "sha-" + body, ReceivedAt: f.clock.Now(), Forward: true, Routes: []string{route},
		Body: []byte(body), ContentType: "application/json",
	}
	if version > 0 {
		d.Version, d.VersionOrder = strconv.FormatUint(version, 10), version
	}
	return d
}

// pagedList is Outbox or DeadLetters.
type pagedList func(context.Context, forward.Target, storage.Page) ([]forward.Entry, string, error)

// listAll pages through a list to its end, limit items a page: every
// list the cases read goes through the cursors. A page is never longer
// than the limit, and never repeats an item of an earlier one.
func listAll(list pagedList, tg forward.Target, limit int) ([]forward.Entry, error) {
	var all []forward.Entry
	seen := make(map[string]bool)
	cursor := ""
	for {
		items, next, err := list(ctx, tg, storage.Page{Limit: limit, Cursor: cursor})
		if err != nil {
			return all, err
		}
		if len(items) > limit {
			return all, fmt.Errorf("a page of %d items, limit %d", len(items), limit)
		}
		for _, e := range items {
			key := e.Source + "/" + e.Route + "/" + e.RequestID + "/" + strconv.FormatUint(e.Seq, 10)
			if seen[key] {
				return all, fmt.Errorf("%s listed twice", key)
			}
			seen[key] = true
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		// A page may come back short, or empty, when its backend bounds
		// what one page examines; its cursor must still move on.
		if next == cursor {
			return all, errors.New("a next cursor that does not move on")
		}
		cursor = next
	}
}

// outbox lists target's outbox, three entries a page.
func (f *fixture) outbox(tg forward.Target) ([]forward.Entry, error) {
	return listAll(f.b.Outbox, tg, 3)
}

// deadLetters lists target's dead letters, three a page.
func (f *fixture) deadLetters(tg forward.Target) ([]forward.Entry, error) {
	return listAll(f.b.DeadLetters, tg, 3)
}

func (f *fixture) decide(d webhookd.Delivery) webhookd.Outcome {
	f.t.Helper()
	out, err := f.b.Decide(ctx, d)
	if err != nil {
		f.t.Fatalf("Decide %s: %v", d.RequestID, err)
	}
	return out
}

func (f *fixture) accept(requestID, resource string, version uint64) {
	f.t.Helper()
	if out := f.decide(f.delivery(requestID, resource, version, `{"id":"`+requestID+`"}`)); out.Decision != webhookd.Accepted {
		f.t.Fatalf("%s: %s, want accepted", requestID, out.Decision)
	}
}

// acceptOn accepts requestID, forwarded to routes.
func (f *fixture) acceptOn(requestID, resource string, version uint64, routes ...string) {
	f.t.Helper()
	d := f.delivery(requestID, resource, version, `{"id":"`+requestID+`"}`)
	d.Routes = routes
	if out := f.decide(d); out.Decision != webhookd.Accepted {
		f.t.Fatalf("%s: %s, want accepted", requestID, out.Decision)
	}
}

func (f *fixture) receipt(requestID string) *dedupe.Receipt {
	f.t.Helper()
	r, err := f.b.Receipt(ctx, source, requestID)
	if err != nil {
		f.t.Fatalf("receipt %s: %v", requestID, err)
	}
	return r
}

func (f *fixture) claim(owner string, n int, lease time.Duration) []forward.Claim {
	f.t.Helper()
	return f.claimOn(route, owner, n, lease)
}

// claimOn claims on one route of source.
func (f *fixture) claimOn(route, owner string, n int, lease time.Duration) []forward.Claim {
	f.t.Helper()
	claims, err := f.b.Claim(ctx, owner, forward.Target{Source: source, Route: route}, n, lease)
	if err != nil {
		f.t.Fatal(err)
	}
	return claims
}

// status is the forward status of requestID's receipt on route; its State
// is empty when the request was not forwarded there.
func (f *fixture) status(requestID, route string) webhookd.ForwardStatus {
	f.t.Helper()
	if rs := f.receipt(requestID).Route(route); rs != nil {
		return rs.ForwardStatus
	}
	return webhookd.ForwardStatus{}
}

func (f *fixture) settle(c forward.Claim, state webhookd.ForwardState) {
	f.t.Helper()
	r := forward.Result{State: state, Attempts: c.Attempts + 1, Status: 200, At: f.clock.Now()}
	if state == webhookd.ForwardRetrying {
		r.Status, r.NextAttemptAt = 503, f.clock.Now().Add(time.Minute)
	}
	if err := f.b.Settle(ctx, c, r); err != nil {
		f.t.Fatalf("settle %s: %v", c.RequestID, err)
	}
}

func ids(claims []forward.Claim) []string {
	var out []string
	for _, c := range claims {
		out = append(out, c.RequestID)
	}
	return out
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if webhookd.ErrorCode(err) != code {
		t.Errorf("%s: %v, want %s", what, err, code)
	}
}

func testDecisionMatrix(t *testing.T, open Open) {
	f := newFixture(t, open)
	steps := []struct {
		d       webhookd.Delivery
		want    webhookd.Decision
		latest  string
		pending bool
	}{
		{f.delivery("plain", "", 0, "a"), webhookd.Accepted, "", true},
		{f.delivery("plain", "", 0, "a"), webhookd.Duplicate, "", true},
		{f.delivery("plain", "", 0, "other"), webhookd.Conflict, "", true},
		{f.delivery("v1", "sub", 1, "1"), webhookd.Accepted, "1", true},
		{f.delivery("v3", "sub", 3, "3"), webhookd.Accepted, "3", true},
		{f.delivery("v2", "sub", 2, "2"), webhookd.Stale, "3", false},
		{f.delivery("v3-again", "sub", 3, "3b"), webhookd.Stale, "3", false},
		{f.delivery("v1", "sub", 1, "1"), webhookd.Duplicate, "3", true},
		{f.delivery("v2", "sub", 2, "2"), webhookd.Duplicate, "3", false},
	}
	for i, s := range steps {
		out := f.decide(s.d)
		if out.Decision != s.want || out.LatestVersion != s.latest {
			t.Errorf("step %d, %s: %+v, want %s with latest %q", i, s.d.RequestID, out, s.want, s.latest)
		}
		if st := f.status(s.d.RequestID, route).State; (st == webhookd.ForwardPending) != s.pending {
			t.Errorf("step %d, %s: forward %q, pending %v", i, s.d.RequestID, st, s.pending)
		}
	}
	if r := f.receipt("plain"); r.Decision != webhookd.Accepted || r.Attempts != 3 || len(r.Deliveries) != 3 || r.Deliveries[2].Decision != webhookd.Conflict {
		t.Errorf("receipt after a duplicate and a conflict: %+v", r)
	}
	if r := f.receipt("v2"); r.Decision != webhookd.Stale || r.Attempts != 2 || r.LatestVersionAtDecision != "3" || r.Reason == "" {
		t.Errorf("stale receipt %+v", r)
	}
	if l, err := f.b.Latest(ctx, source, "sub"); err != nil || l.Version != "3" || l.RequestID != "v3" {
		t.Errorf("latest %+v, %v", l, err)
	}
	_, err := f.b.Latest(ctx, source, "none")
	wantCode(t, "latest of an unknown resource", err, webhookd.ENOTFOUND)
	_, err = f.b.Receipt(ctx, source, "never")
	wantCode(t, "receipt of an unknown request", err, webhookd.ENOTFOUND)
	entries, err := f.outbox(forward.Target{Source: source})
	if err != nil || len(entries) != 3 {
		t.Errorf("outbox %+v, %v; want the three accepted", entries, err)
	}
	unforwarded := f.delivery("quiet", "", 0, "q")
	unforwarded.Forward, unforwarded.Routes = false, nil
	f.decide(unforwarded)
	if r := f.receipt("quiet"); r.Decision != webhookd.Accepted || len(r.Routes) != 0 || r.Unrouted {
		t.Errorf("unforwarded receipt %+v", r)
	}
}

func testConcurrentDeliveriesAcceptOnce(t *testing.T, open Open) {
	f := newFixture(t, open)
	var accepted, duplicate atomic.Int32
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			d := f.delivery("req-1", "", 0, "same")
			d.DeliveryID = fmt.Sprint("d-", i)
			out, err := f.b.Decide(ctx, d)
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
	if accepted.Load() != 1 || duplicate.Load() != 199 {
		t.Errorf("accepted %d, duplicate %d; want 1 and 199", accepted.Load(), duplicate.Load())
	}
	if r := f.receipt("req-1"); r.Attempts != 200 {
		t.Errorf("receipt counts %d deliveries, want 200", r.Attempts)
	}
	if entries, _ := f.outbox(forward.Target{}); len(entries) != 1 {
		t.Errorf("outbox holds %d entries, want 1", len(entries))
	}
}

func testConcurrentVersions(t *testing.T, open Open) {
	f := newFixture(t, open)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var accepted []uint64
	for v := uint64(1); v <= 100; v++ {
		wg.Go(func() {
			out, err := f.b.Decide(ctx, f.delivery(fmt.Sprint("req-", v), "sub", v, fmt.Sprint(v)))
			if err != nil {
				t.Error(err)
				return
			}
			if out.Decision == webhookd.Accepted {
				mu.Lock()
				accepted = append(accepted, v)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	l, err := f.b.Latest(ctx, source, "sub")
	if err != nil || l.Order != 100 {
		t.Fatalf("latest %+v, %v; want version 100", l, err)
	}
	// Accepted versions are the outbox's lane, in order.
	entries, err := f.outbox(forward.Target{Source: source})
	if err != nil || len(entries) != len(accepted) {
		t.Fatalf("outbox %d entries, %v; %d accepted", len(entries), err, len(accepted))
	}
	var got []uint64
	for _, e := range entries {
		n, _ := strconv.ParseUint(e.Version, 10, 64)
		got = append(got, n)
	}
	if !slices.IsSorted(got) {
		t.Errorf("outbox versions %v are not in order", got)
	}
}

// A source that accepts ties applies a version equal to the latest after
// it, in arrival order; one that does not finds it stale. Older is stale
// either way.
func testTies(t *testing.T, open Open) {
	f := newFixture(t, open)
	tie := func(requestID string, version uint64) webhookd.Delivery {
		d := f.delivery(requestID, "inv", version, `{"id":"`+requestID+`"}`)
		d.AcceptTies = true
		return d
	}
	steps := []struct {
		d        webhookd.Delivery
		want     webhookd.Decision
		ordering versioning.Ordering
		latestID string // the latest version's request ID after the step
	}{
		{f.delivery("created", "inv", 5, `{"id":"created"}`), webhookd.Accepted, versioning.First, "created"},
		{f.delivery("refused", "inv", 5, `{"id":"refused"}`), webhookd.Stale, versioning.Stale, "created"},
		{tie("finalized", 5), webhookd.Accepted, versioning.Tie, "finalized"},
		{tie("older", 4), webhookd.Stale, versioning.Stale, "finalized"},
		{tie("paid", 5), webhookd.Accepted, versioning.Tie, "paid"},
		{tie("finalized", 5), webhookd.Duplicate, versioning.Tie, "paid"},
	}
	for i, s := range steps {
		if out := f.decide(s.d); out.Decision != s.want || out.LatestVersion != "5" {
			t.Errorf("step %d, %s: %+v, want %s with latest 5", i, s.d.RequestID, out, s.want)
		}
		if r := f.receipt(s.d.RequestID); r.OrderingDecision != string(s.ordering) {
			t.Errorf("step %d, %s: ordering %q, want %q", i, s.d.RequestID, r.OrderingDecision, s.ordering)
		}
		if l, err := f.b.Latest(ctx, source, "inv"); err != nil || l.Version != "5" || l.RequestID != s.latestID {
			t.Errorf("step %d, %s: latest %+v, %v; want version 5 of %s", i, s.d.RequestID, l, err, s.latestID)
		}
	}
	f.reopen()
	r := f.receipt("finalized")
	if want := dedupe.Reason(versioning.Tie, "5", "5"); r.Decision != webhookd.Accepted || r.LatestVersionAtDecision != "5" || r.Reason != want {
		t.Errorf("tied receipt after reopening: %s, latest at decision %q, reason %q; want accepted, 5, %q", r.Decision, r.LatestVersionAtDecision, r.Reason, want)
	}
	// The lane holds the accepted versions in arrival order.
	var lane []string
	for {
		claims := f.claim("one", 10, time.Minute)
		if len(claims) == 0 {
			break
		}
		if len(claims) != 1 || claims[0].Newer != (len(lane) < 2) {
			t.Fatalf("claimed %v (newer %v) after %v", ids(claims), claims[0].Newer, lane)
		}
		lane = append(lane, claims[0].RequestID)
		f.settle(claims[0], webhookd.ForwardDelivered)
	}
	if !slices.Equal(lane, []string{"created", "finalized", "paid"}) {
		t.Errorf("lane sent %v, want created, finalized, paid", lane)
	}
}

func testFailedCommitWritesNothing(t *testing.T, open Open) {
	f := newFixture(t, open)
	var fail atomic.Bool
	f.cfg.FailCommit = fail.Load
	f.reopen()
	f.accept("before", "sub", 1)
	fail.Store(true)
	if _, err := f.b.Decide(ctx, f.delivery("lost", "sub", 2, "2")); err == nil || webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Fatalf("Decide with a failing commit: %v, want unavailable", err)
	}
	fail.Store(false)
	// A backend either fails for good, saying so, or goes on once the
	// fault is gone, as if the failed decision had not been asked.
	after := f.delivery("after", "", 0, "after")
	after.Source = "other"
	select {
	case <-f.b.Failed():
		wantCode(t, "Ready after Failed", f.b.Ready(), webhookd.EUNAVAILABLE)
		_, err := f.b.Decide(ctx, after)
		wantCode(t, "Decide after Failed", err, webhookd.EUNAVAILABLE)
	default:
		if out := f.decide(after); out.Decision != webhookd.Accepted {
			t.Errorf("after a failed commit, without Failed: %s, want accepted", out.Decision)
		}
		waitReady(t, f.b)
	}
	f.reopen()
	if err := f.b.Ready(); err != nil {
		t.Errorf("Ready after reopening: %v", err)
	}
	_, err := f.b.Receipt(ctx, source, "lost")
	wantCode(t, "receipt of the failed decision", err, webhookd.ENOTFOUND)
	if l, err := f.b.Latest(ctx, source, "sub"); err != nil || l.Version != "1" {
		t.Errorf("latest after the failed decision: %+v, %v; want 1", l, err)
	}
	if entries, err := f.outbox(forward.Target{Source: source}); err != nil || len(entries) != 1 || entries[0].RequestID != "before" {
		t.Errorf("outbox after the failed decision: %+v, %v", entries, err)
	}
	f.accept("lost", "sub", 2)
}

func testReadiness(t *testing.T, open Open) {
	f := newFixture(t, open)
	if err := f.b.Ready(); err != nil {
		t.Fatalf("Ready when open: %v", err)
	}
	select {
	case <-f.b.Failed():
		t.Fatal("Failed is closed on a backend that never failed")
	default:
	}
	f.accept("req-1", "", 0)
	if err := f.b.Close(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "Ready after Close", f.b.Ready(), webhookd.EUNAVAILABLE)
	_, err := f.b.Decide(ctx, f.delivery("req-2", "", 0, "2"))
	wantCode(t, "Decide after Close", err, webhookd.EUNAVAILABLE)
	_, err = f.b.Claim(ctx, "a", target, 1, time.Minute)
	wantCode(t, "Claim after Close", err, webhookd.EUNAVAILABLE)
}

// waitReady waits until b is ready: a backend that is not, after a fault,
// may find out that the fault is gone only when it next checks.
func waitReady(t *testing.T, b storage.Backend) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := b.Ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready 30s after the fault was gone: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testReceiptsExpire(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.accept("req-1", "", 0)
	f.accept("v1", "sub", 1)
	f.clock.Advance(f.cfg.ReceiptTTL - time.Minute)
	d := f.delivery("req-1", "", 0, `{"id":"req-1"}`)
	if out := f.decide(d); out.Decision != webhookd.Duplicate {
		t.Fatalf("within the TTL: %s, want duplicate", out.Decision)
	}
	// The TTL runs from the last delivery.
	f.clock.Advance(f.cfg.ReceiptTTL - time.Minute)
	if r := f.receipt("req-1"); r.Attempts != 2 {
		t.Fatalf("receipt %+v", r)
	}
	f.clock.Advance(2 * time.Minute)
	_, err := f.b.Receipt(ctx, source, "req-1")
	wantCode(t, "receipt past its TTL", err, webhookd.ENOTFOUND)
	d.ReceivedAt = f.clock.Now()
	if out := f.decide(d); out.Decision != webhookd.Accepted {
		t.Errorf("past the TTL: %s, want accepted as new work", out.Decision)
	}
	// Latest versions never expire: a forgotten request ID is new work,
	// and its old version is stale now.
	if l, err := f.b.Latest(ctx, source, "sub"); err != nil || l.Version != "1" {
		t.Errorf("latest past the TTL: %+v, %v", l, err)
	}
	if out := f.decide(f.delivery("v1", "sub", 1, `{"id":"v1"}`)); out.Decision != webhookd.Stale {
		t.Errorf("v1 again past the TTL: %s, want stale", out.Decision)
	}
}

func testLanes(t *testing.T, open Open) {
	f := newFixture(t, open)
	for v := uint64(1); v <= 3; v++ {
		f.accept(fmt.Sprint("a", v), "res-a", v)
	}
	f.accept("b1", "res-b", 1)
	f.accept("x", "", 0)
	f.accept("y", "", 0)
	claims := f.claim("one", 10, time.Hour)
	if got := ids(claims); !slices.Equal(got, []string{"a1", "b1", "x", "y"}) {
		t.Fatalf("claimed %v, want each lane's head in outbox order", got)
	}
	if !claims[0].Newer || claims[1].Newer || claims[2].Newer {
		t.Errorf("newer: %v %v %v; want only a1's lane to have more", claims[0].Newer, claims[1].Newer, claims[2].Newer)
	}
	for _, c := range claims {
		if string(c.Body) != `{"id":"`+c.RequestID+`"}` || c.Owner != "one" || c.Until.IsZero() {
			t.Errorf("claim %+v", c)
		}
	}
	if more := f.claim("two", 10, time.Minute); len(more) != 0 {
		t.Fatalf("claimed %v while every head was claimed", ids(more))
	}
	if n, err := f.b.Pending(ctx); err != nil || n[target] != 6 {
		t.Errorf("pending %v, %v; want 6", n, err)
	}
	f.settle(claims[0], webhookd.ForwardDelivered)
	next := f.claim("two", 10, time.Minute)
	if got := ids(next); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("after settling a1, claimed %v; want a2", got)
	}
	f.settle(next[0], webhookd.ForwardRetrying)
	if got := f.claim("two", 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed %v before a2's retry is due", ids(got))
	}
	f.clock.Advance(time.Minute)
	retry := f.claim("two", 10, time.Minute)
	if len(retry) != 1 || retry[0].RequestID != "a2" || retry[0].Attempts != 1 || retry[0].LastStatus != 503 {
		t.Fatalf("when due, claimed %+v; want a2 after one attempt", retry)
	}
	f.settle(retry[0], webhookd.ForwardSuperseded)
	if got := ids(f.claim("two", 10, time.Minute)); !slices.Equal(got, []string{"a3"}) {
		t.Errorf("claimed %v, want a3", got)
	}
	if st := f.status("a2", route); st.State != webhookd.ForwardSuperseded {
		t.Errorf("a2: %+v", st)
	}
}

func testLeaseExpiry(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.accept("req-1", "sub", 1)
	f.accept("req-2", "sub", 2)
	a := f.claim("a", 1, 10*time.Second)
	if len(a) != 1 {
		t.Fatalf("a claimed %v", ids(a))
	}
	f.clock.Advance(9 * time.Second)
	if b := f.claim("b", 1, 10*time.Second); len(b) != 0 {
		t.Fatalf("b claimed %v within a's lease", ids(b))
	}
	f.clock.Advance(2 * time.Second) // a died
	b := f.claim("b", 1, 10*time.Second)
	if len(b) != 1 || b[0].RequestID != "req-1" || b[0].Token == a[0].Token || b[0].Owner != "b" {
		t.Fatalf("after a's lease, b claimed %+v; want req-1 under its own token", b)
	}
	err := f.b.Settle(ctx, a[0], forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: f.clock.Now()})
	if !errors.Is(err, forward.ErrLeaseLost) {
		t.Fatalf("a settles after b reclaimed: %v, want ErrLeaseLost", err)
	}
	f.settle(b[0], webhookd.ForwardDelivered)
	// A lease that ended but was not reclaimed still settles.
	c := f.claim("c", 1, time.Second)
	f.clock.Advance(time.Hour)
	f.settle(c[0], webhookd.ForwardDelivered)
	if entries, _ := f.outbox(forward.Target{}); len(entries) != 0 {
		t.Errorf("outbox holds %d entries", len(entries))
	}
}

func testSettleIdempotent(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.accept("req-1", "", 0)
	f.accept("req-2", "", 0)
	f.accept("req-3", "", 0)
	claims := f.claim("a", 3, time.Minute)
	states := []webhookd.ForwardState{webhookd.ForwardDelivered, webhookd.ForwardRetrying, webhookd.ForwardDead}
	for i, c := range claims {
		f.settle(c, states[i])
		f.settle(c, states[i])
	}
	for i, c := range claims {
		if st := f.status(c.RequestID, route); st.State != states[i] || st.Attempts != 1 {
			t.Errorf("%s: %+v, want %s after one attempt", c.RequestID, st, states[i])
		}
	}
	entries, _ := f.outbox(forward.Target{})
	dead, _ := f.deadLetters(forward.Target{})
	if len(entries) != 1 || entries[0].RequestID != "req-2" || entries[0].Attempts != 1 || len(dead) != 1 || dead[0].RequestID != "req-3" {
		t.Errorf("outbox %+v, dead letters %+v", entries, dead)
	}
	f.clock.Advance(time.Minute)
	again := f.claim("b", 3, time.Minute)
	if len(again) != 1 || again[0].RequestID != "req-2" {
		t.Fatalf("claimed %v, want the rescheduled req-2", ids(again))
	}
	f.settle(claims[1], webhookd.ForwardRetrying) // a's first claim, settled already: nothing happens
	f.settle(again[0], webhookd.ForwardDelivered)
	if st := f.status("req-2", route); st.State != webhookd.ForwardDelivered || st.Attempts != 2 {
		t.Errorf("req-2: %+v", st)
	}
}

func testPayloadGone(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.accept("req-1", "", 0)
	f.clock.Advance(f.cfg.ReceiptTTL + time.Minute)
	f.reopen()
	claims := f.claim("a", 1, time.Minute)
	if len(claims) != 1 || claims[0].Body != nil {
		t.Fatalf("claimed %+v past the payload's TTL, want it without a body", claims)
	}
	c := claims[0]
	if err := f.b.Settle(ctx, c, forward.Result{State: webhookd.ForwardDead, Error: "payload expired", At: f.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	dead, err := f.deadLetters(target)
	if err != nil || len(dead) != 1 || !dead[0].BodyLost {
		t.Fatalf("dead letters %+v, %v; want one with its body lost", dead, err)
	}
	wantCode(t, "retrying a dead letter without a body", f.b.RetryDeadLetter(ctx, target, "req-1"), webhookd.ECONFLICT)

	// One sent with its body before the payload expired keeps that body.
	f.accept("req-2", "", 0)
	sent := f.claim("a", 1, time.Minute)
	f.clock.Advance(f.cfg.ReceiptTTL + time.Minute)
	if err := f.b.Settle(ctx, sent[0], forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 400, At: f.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := f.b.RetryDeadLetter(ctx, target, "req-2"); err != nil {
		t.Fatalf("retrying a dead letter with its body: %v", err)
	}
	again := f.claim("a", 1, time.Minute)
	if len(again) != 1 || string(again[0].Body) != `{"id":"req-2"}` || again[0].Attempts != 0 {
		t.Errorf("after retry, claimed %+v", again)
	}
}

// testPayloadExpiresWhileWaiting checks that an entry is handed out
// without its body once its payload expired, however the backend keeps
// the body meanwhile (forward.Claim), whether it was never claimed or its
// claim's lease ended.
func testPayloadExpiresWhileWaiting(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.accept("claimed", "", 0)
	if c := f.claim("a", 1, time.Minute); len(c) != 1 || string(c[0].Body) != `{"id":"claimed"}` {
		t.Fatalf("claimed %+v, want it with its body", c)
	}
	f.accept("waiting", "", 0)
	f.clock.Advance(f.cfg.ReceiptTTL + time.Minute)
	claims := f.claim("b", 2, time.Minute)
	if got := ids(claims); !slices.Equal(got, []string{"claimed", "waiting"}) {
		t.Fatalf("claimed %v past the payloads' TTL, want both again", got)
	}
	for _, c := range claims {
		if c.Body != nil {
			t.Errorf("%s claimed with body %q past its payload's TTL, want none", c.RequestID, c.Body)
		}
	}
	if err := f.b.Settle(ctx, claims[0], forward.Result{State: webhookd.ForwardDead, Error: "payload expired", At: f.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if dead, err := f.deadLetters(target); err != nil || len(dead) != 1 || !dead[0].BodyLost {
		t.Errorf("dead letters %+v, %v; want one with its body lost", dead, err)
	}
}

// testNotify checks that a forwarder waiting on Notify is woken by an
// accepted delivery, rather than waiting for its poll.
func testNotify(t *testing.T, open Open) {
	f := newFixture(t, open)
	select {
	case <-f.b.Notify():
	default:
	}
	f.accept("req-1", "", 0)
	select {
	case <-f.b.Notify():
	case <-time.After(30 * time.Second):
		t.Fatal("Notify was not signalled after an accepted delivery")
	}
	if got := ids(f.claim("a", 1, time.Minute)); !slices.Equal(got, []string{"req-1"}) {
		t.Errorf("claimed %v after the signal, want req-1", got)
	}
}

// testCountsByTarget checks Pending and DeadLetterCounts, which metrics
// read: by target (source and route), a target with none absent.
func testCountsByTarget(t *testing.T, open Open) {
	f := newFixture(t, open)
	accept := func(src, requestID string, routes ...string) {
		t.Helper()
		d := f.delivery(requestID, "", 0, requestID)
		d.Source, d.Routes = src, routes
		if out := f.decide(d); out.Decision != webhookd.Accepted {
			t.Fatalf("%s/%s: %s, want accepted", src, requestID, out.Decision)
		}
	}
	counts := func(what string, get func() (map[forward.Target]int, error), want map[forward.Target]int) {
		t.Helper()
		got, err := get()
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("%s: %v, %v; want %v", what, got, err, want)
		}
	}
	pending := func() (map[forward.Target]int, error) { return f.b.Pending(ctx) }
	a, b := forward.Target{Source: source, Route: "a"}, forward.Target{Source: source, Route: "b"}
	shipping := forward.Target{Source: "shipping", Route: "a"}
	counts("pending when empty", pending, map[forward.Target]int{})
	counts("dead letters when empty", f.b.DeadLetterCounts, map[forward.Target]int{})
	for _, id := range []string{"x", "y", "z"} {
		accept(source, id, "a", "b")
	}
	accept(source, "only-b", "b")
	accept("shipping", "s", "a")
	counts("pending", pending, map[forward.Target]int{a: 3, b: 4, shipping: 1})
	for _, c := range f.claimOn("a", "w", 2, time.Minute) {
		f.settle(c, webhookd.ForwardDead)
	}
	claims, err := f.b.Claim(ctx, "w", shipping, 1, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim shipping: %+v, %v", claims, err)
	}
	f.settle(claims[0], webhookd.ForwardDelivered)
	counts("pending after settling", pending, map[forward.Target]int{a: 1, b: 4})
	counts("dead letters", f.b.DeadLetterCounts, map[forward.Target]int{a: 2})
	if err := f.b.DiscardDeadLetter(ctx, a, "x"); err != nil {
		t.Fatal(err)
	}
	if err := f.b.RetryDeadLetter(ctx, a, "y"); err != nil {
		t.Fatal(err)
	}
	counts("dead letters after discard and retry", f.b.DeadLetterCounts, map[forward.Target]int{})
	counts("pending after retry", pending, map[forward.Target]int{a: 2, b: 4})
}

func testRepairs(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.accept("v1", "sub", 1)
	wantCode(t, "redeliver pending", f.b.Redeliver(ctx, source, "v1", route), webhookd.ECONFLICT)
	wantCode(t, "redeliver unknown", f.b.Redeliver(ctx, source, "never", route), webhookd.ENOTFOUND)
	f.settle(f.claim("a", 1, time.Minute)[0], webhookd.ForwardDelivered)
	if err := f.b.Redeliver(ctx, source, "v1", route); err != nil {
		t.Fatalf("redeliver delivered: %v", err)
	}
	if st := f.status("v1", route); st.State != webhookd.ForwardPending {
		t.Errorf("after redeliver: %+v", st)
	}
	f.settle(f.claim("a", 1, time.Minute)[0], webhookd.ForwardDelivered)
	f.accept("v2", "sub", 2)
	wantCode(t, "redeliver an older version", f.b.Redeliver(ctx, source, "v1", route), webhookd.ECONFLICT)
	stale := f.delivery("v0", "sub", 1, "0")
	f.decide(stale)
	wantCode(t, "redeliver stale", f.b.Redeliver(ctx, source, "v0", route), webhookd.ECONFLICT)
	quiet := f.delivery("quiet", "", 0, "q")
	quiet.Forward, quiet.Routes = false, nil
	f.decide(quiet)
	wantCode(t, "redeliver unforwarded", f.b.Redeliver(ctx, source, "quiet", ""), webhookd.ECONFLICT)
	wantCode(t, "redeliver unforwarded to a route", f.b.Redeliver(ctx, source, "quiet", route), webhookd.ENOTFOUND)

	f.settle(f.claim("a", 1, time.Minute)[0], webhookd.ForwardDead) // v2
	wantCode(t, "redeliver a dead letter", f.b.Redeliver(ctx, source, "v2", route), webhookd.ECONFLICT)
	wantCode(t, "retry unknown", f.b.RetryDeadLetter(ctx, target, "never"), webhookd.ENOTFOUND)
	wantCode(t, "discard unknown", f.b.DiscardDeadLetter(ctx, target, "never"), webhookd.ENOTFOUND)
	if err := f.b.RetryDeadLetter(ctx, target, "v2"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if st := f.status("v2", route); st.State != webhookd.ForwardPending {
		t.Errorf("after retry: %+v", st)
	}
	c := f.claim("a", 1, time.Minute)
	if len(c) != 1 || c[0].RequestID != "v2" || c[0].Attempts != 0 {
		t.Fatalf("after retry, claimed %+v", c)
	}
	f.settle(c[0], webhookd.ForwardDead)
	if err := f.b.DiscardDeadLetter(ctx, target, "v2"); err != nil {
		t.Fatal(err)
	}
	if st := f.status("v2", route); st.State != webhookd.ForwardDiscarded || st.Attempts != 1 {
		t.Errorf("after discard: %+v", st)
	}
	if dead, _ := f.deadLetters(forward.Target{}); len(dead) != 0 {
		t.Errorf("dead letters after discard: %+v", dead)
	}
	// Discarding ends the attempts only: the receipt keeps the payload, and
	// a redelivery sends it again.
	if err := f.b.Redeliver(ctx, source, "v2", route); err != nil {
		t.Fatalf("redeliver after discard: %v", err)
	}
	if again := f.claim("a", 1, time.Minute); len(again) != 1 || again[0].RequestID != "v2" || string(again[0].Body) != `{"id":"v2"}` {
		t.Errorf("after redelivering a discarded request, claimed %+v", again)
	}
}

func testDurable(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.accept("v1", "sub", 1)
	f.accept("v2", "sub", 2)
	f.accept("x", "", 0)
	claims := f.claim("a", 10, time.Minute)
	f.settle(claims[0], webhookd.ForwardDelivered) // v1
	f.settle(claims[1], webhookd.ForwardDead)      // x
	f.reopen()
	if st := f.status("v1", route); st.State != webhookd.ForwardDelivered {
		t.Errorf("v1 after reopen: %+v", st)
	}
	if l, err := f.b.Latest(ctx, source, "sub"); err != nil || l.Version != "2" {
		t.Errorf("latest after reopen: %+v, %v", l, err)
	}
	if dead, _ := f.deadLetters(forward.Target{}); len(dead) != 1 || dead[0].RequestID != "x" {
		t.Errorf("dead letters after reopen: %+v", dead)
	}
	// Reopening ends every claim.
	if got := ids(f.claim("b", 10, time.Minute)); !slices.Equal(got, []string{"v2"}) {
		t.Errorf("claimed %v after reopen, want v2", got)
	}
	if out := f.decide(f.delivery("v1", "sub", 1, `{"id":"v1"}`)); out.Decision != webhookd.Duplicate || out.LatestVersion != "2" {
		t.Errorf("redelivery after reopen: %+v", out)
	}
}

// testTwoForwarders runs two owners claiming and settling on two routes
// at once, as two forwarders do, route b taking the even resources only:
// each route gets each of its resources' versions once delivered, in
// order, and never two of one lane at a time.
func testTwoForwarders(t *testing.T, open Open) {
	b := open(t, Config{Dir: t.TempDir(), Now: time.Now, ReceiptTTL: time.Hour})
	type lane struct{ route, resource string }
	var mu sync.Mutex
	sent := make(map[lane][]int)
	inFlight := make(map[lane]bool)
	var calls atomic.Int32
	send := func(owner string, tg forward.Target, c forward.Claim) {
		l := lane{tg.Route, c.Resource}
		v, _ := strconv.Atoi(c.Version)
		mu.Lock()
		if inFlight[l] {
			t.Errorf("%s claimed %s/%s while another claim of its lane was out", owner, tg, c.RequestID)
		}
		inFlight[l] = true
		sent[l] = append(sent[l], v)
		mu.Unlock()
		r := forward.Result{State: webhookd.ForwardDelivered, Attempts: c.Attempts + 1, Status: 200, At: time.Now()}
		if calls.Add(1)%7 == 0 { // some retries
			r.State, r.Status, r.NextAttemptAt = webhookd.ForwardRetrying, 503, time.Now().Add(time.Millisecond)
		}
		mu.Lock()
		delete(inFlight, l)
		mu.Unlock()
		if err := b.Settle(ctx, c, r); err != nil {
			t.Errorf("%s settles %s/%s: %v", owner, tg, c.RequestID, err)
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 {
		for _, rt := range []string{"a", "b"} {
			owner, tg := fmt.Sprint("forwarder-", i), forward.Target{Source: source, Route: rt}
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					claims, err := b.Claim(ctx, owner, tg, 4, time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					for _, c := range claims {
						send(owner, tg, c)
					}
					if len(claims) == 0 {
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
	}
	const resources, versions = 5, 20
	for v := 1; v <= versions; v++ {
		for r := range resources {
			d := webhookd.Delivery{Source: source, RequestID: fmt.Sprintf("r%d-v%d", r, v), Resource: fmt.Sprint("res-", r),
				Version: strconv.Itoa(v), VersionOrder: uint64(v), Fingerprint: fmt.Sprint(r, v), ReceivedAt: time.Now(),
				Forward: true, Routes: []string{"a"}, Body: []byte("{}")}
			if r%2 == 0 {
				d.Routes = append(d.Routes, "b")
			}
			if out, err := b.Decide(ctx, d); err != nil || out.Decision != webhookd.Accepted {
				t.Fatalf("%s: %+v, %v", d.RequestID, out, err)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := b.Pending(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(n) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries still pending: %v", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(done)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for r := range resources {
		for _, rt := range []string{"a", "b"} {
			seen := sent[lane{rt, fmt.Sprint("res-", r)}]
			want := versions
			if rt == "b" && r%2 != 0 {
				want = 0
			}
			if !slices.IsSorted(seen) {
				t.Errorf("route %s, res-%d sent as %v, out of order", rt, r, seen)
			}
			if got := len(slices.Compact(slices.Clone(seen))); got != want {
				t.Errorf("route %s, res-%d: %d distinct versions sent, want %d", rt, r, got, want)
			}
		}
	}
}

// routed lists entries as route/request ID.
func routed(entries []forward.Entry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Route+"/"+e.RequestID)
	}
	return out
}

// wantStates checks requestID's forward state on routes a and b.
func (f *fixture) wantStates(step, requestID string, a, b webhookd.ForwardState) {
	f.t.Helper()
	if got := [2]webhookd.ForwardState{f.status(requestID, "a").State, f.status(requestID, "b").State}; got != [2]webhookd.ForwardState{a, b} {
		f.t.Errorf("%s: %s on routes a and b is %v, want %s and %s", step, requestID, got, a, b)
	}
}

// testFanOut checks that a delivery's entries, one per route with the
// shared body, are written in its decision's transaction: a failed
// commit leaves no entry of any route.
func testFanOut(t *testing.T, open Open) {
	f := newFixture(t, open)
	var fail atomic.Bool
	f.cfg.FailCommit = fail.Load
	f.reopen()
	f.acceptOn("both", "sub", 1, "a", "b")
	entries, err := f.outbox(forward.Target{Source: source})
	if got := routed(entries); err != nil || !slices.Equal(got, []string{"a/both", "b/both"}) {
		t.Fatalf("outbox %v, %v; want an entry of both on a, then b", got, err)
	}
	for _, rt := range []string{"a", "b"} {
		c := f.claimOn(rt, "w", 10, time.Minute)
		if len(c) != 1 || c[0].Route != rt || c[0].RequestID != "both" || string(c[0].Body) != `{"id":"both"}` || c[0].Version != "1" {
			t.Errorf("claimed on %s: %+v, want both with its body", rt, c)
		}
	}
	pending := webhookd.ForwardStatus{State: webhookd.ForwardPending}
	want := []webhookd.RouteStatus{{Route: "a", ForwardStatus: pending}, {Route: "b", ForwardStatus: pending}}
	if r := f.receipt("both"); !slices.Equal(r.Routes, want) || r.Unrouted {
		t.Errorf("receipt routes %+v (unrouted %v), want %+v", r.Routes, r.Unrouted, want)
	}

	fail.Store(true)
	lost := f.delivery("lost", "sub", 2, "2")
	lost.Routes = []string{"a", "b"}
	if _, err := f.b.Decide(ctx, lost); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Fatalf("Decide with a failing commit: %v, want unavailable", err)
	}
	fail.Store(false)
	f.reopen()
	_, err = f.b.Receipt(ctx, source, "lost")
	wantCode(t, "receipt of the failed decision", err, webhookd.ENOTFOUND)
	entries, err = f.outbox(forward.Target{})
	if got := routed(entries); err != nil || !slices.Equal(got, []string{"a/both", "b/both"}) {
		t.Errorf("outbox after the failed decision: %v, %v; want both's entries only", got, err)
	}
	a, b := forward.Target{Source: source, Route: "a"}, forward.Target{Source: source, Route: "b"}
	if n, err := f.b.Pending(ctx); err != nil || !maps.Equal(n, map[forward.Target]int{a: 1, b: 1}) {
		t.Errorf("pending after the failed decision: %v, %v", n, err)
	}
}

// testRouteStatuses checks that a receipt's routes are pending at first,
// then each settles on its own, and that a redelivery of the request ID
// keeps every route's status for as long as the receipt it extends.
func testRouteStatuses(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.acceptOn("r", "", 0, "a", "b")
	f.wantStates("accepted", "r", webhookd.ForwardPending, webhookd.ForwardPending)
	ca, cb := f.claimOn("a", "w", 1, time.Minute), f.claimOn("b", "w", 1, time.Minute)
	if len(ca) != 1 || len(cb) != 1 {
		t.Fatalf("claimed %v on a, %v on b", ids(ca), ids(cb))
	}
	f.settle(ca[0], webhookd.ForwardDelivered)
	f.wantStates("a delivered", "r", webhookd.ForwardDelivered, webhookd.ForwardPending)
	if st := f.status("r", "a"); st.Attempts != 1 || st.LastStatus != 200 || st.DeliveredAt == nil {
		t.Errorf("a delivered: %+v", st)
	}
	f.settle(cb[0], webhookd.ForwardDead)
	f.wantStates("b dead", "r", webhookd.ForwardDelivered, webhookd.ForwardDead)

	f.clock.Advance(f.cfg.ReceiptTTL - time.Minute)
	d := f.delivery("r", "", 0, `{"id":"r"}`)
	d.Routes = []string{"a", "b"}
	if out := f.decide(d); out.Decision != webhookd.Duplicate {
		t.Fatalf("redelivery: %s, want duplicate", out.Decision)
	}
	f.clock.Advance(2 * time.Minute)
	f.wantStates("a TTL after settling, within the redelivery's", "r", webhookd.ForwardDelivered, webhookd.ForwardDead)
	f.reopen()
	f.wantStates("after reopening", "r", webhookd.ForwardDelivered, webhookd.ForwardDead)
	if r := f.receipt("r"); len(r.Routes) != 2 || r.Routes[0].Route != "a" || r.Routes[1].Route != "b" {
		t.Errorf("receipt routes %+v, want a then b", r.Routes)
	}
}

// testUnrouted checks an accepted delivery of a forwarding source that
// matched no route: accepted, its receipt routed nowhere, no entry.
func testUnrouted(t *testing.T, open Open) {
	f := newFixture(t, open)
	d := f.delivery("nowhere", "sub", 1, "n")
	d.Routes = nil
	if out := f.decide(d); out.Decision != webhookd.Accepted || out.LatestVersion != "1" {
		t.Fatalf("unrouted delivery: %+v, want accepted with latest 1", out)
	}
	if r := f.receipt("nowhere"); !r.Unrouted || len(r.Routes) != 0 {
		t.Errorf("receipt routes %+v, unrouted %v; want routed nowhere", r.Routes, r.Unrouted)
	}
	if entries, err := f.outbox(forward.Target{}); err != nil || len(entries) != 0 {
		t.Errorf("outbox %+v, %v; want empty", entries, err)
	}
	if n, err := f.b.Pending(ctx); err != nil || len(n) != 0 {
		t.Errorf("pending %v, %v; want none", n, err)
	}
	wantCode(t, "redeliver an unrouted request", f.b.Redeliver(ctx, source, "nowhere", ""), webhookd.ECONFLICT)
	if out := f.decide(d); out.Decision != webhookd.Duplicate {
		t.Errorf("redelivery: %s, want duplicate", out.Decision)
	}
	if r := f.receipt("nowhere"); !r.Unrouted || len(r.Routes) != 0 {
		t.Errorf("after a redelivery, receipt routes %+v, unrouted %v", r.Routes, r.Unrouted)
	}
}

// testLanesPerRoute checks that each route has its own lane of a
// resource: both routes' heads are claimable at once, and a route's next
// version waits for its own head only.
func testLanesPerRoute(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.acceptOn("v1", "res", 1, "a", "b")
	f.acceptOn("v2", "res", 2, "a", "b")
	a := f.claimOn("a", "w", 10, time.Hour)
	if len(a) != 1 || a[0].RequestID != "v1" || !a[0].Newer {
		t.Fatalf("claimed on a: %+v, want v1 with a newer entry behind it", a)
	}
	b := f.claimOn("b", "w", 10, time.Hour)
	if len(b) != 1 || b[0].RequestID != "v1" || b[0].Route != "b" {
		t.Fatalf("claimed on b while a's v1 is out: %+v, want b's v1", b)
	}
	if more := f.claimOn("a", "w", 10, time.Hour); len(more) != 0 {
		t.Fatalf("claimed %v on a while a's v1 is out", ids(more))
	}
	f.settle(a[0], webhookd.ForwardDelivered)
	if next := f.claimOn("a", "w", 10, time.Hour); len(next) != 1 || next[0].RequestID != "v2" || next[0].Newer {
		t.Fatalf("after a's v1, claimed on a %+v; want v2 while b's v1 is still out", next)
	}
	if more := f.claimOn("b", "w", 10, time.Hour); len(more) != 0 {
		t.Fatalf("claimed %v on b while b's v1 is out", ids(more))
	}
	f.settle(b[0], webhookd.ForwardRetrying)
	f.clock.Advance(time.Minute)
	if again := f.claimOn("b", "w", 10, time.Hour); len(again) != 1 || again[0].RequestID != "v1" || again[0].Attempts != 1 {
		t.Errorf("when due, claimed on b %+v; want v1 again", again)
	}
}

// testDeadLetterPerRoute checks that a route's dead letter leaves the
// other route's lane as it was.
func testDeadLetterPerRoute(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.acceptOn("v1", "res", 1, "a", "b")
	f.acceptOn("v2", "res", 2, "a", "b")
	a := f.claimOn("a", "w", 10, time.Minute)
	b := f.claimOn("b", "w", 10, time.Minute)
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("claimed %v on a, %v on b", ids(a), ids(b))
	}
	f.settle(b[0], webhookd.ForwardDead)
	if next := f.claimOn("b", "w", 10, time.Minute); len(next) != 1 || next[0].RequestID != "v2" {
		t.Fatalf("after b's dead letter, claimed on b %v; want v2", ids(next))
	} else {
		f.settle(next[0], webhookd.ForwardDelivered)
	}
	f.settle(a[0], webhookd.ForwardDelivered)
	if next := f.claimOn("a", "w", 10, time.Minute); len(next) != 1 || next[0].RequestID != "v2" {
		t.Fatalf("after a's v1, claimed on a %v; want v2", ids(next))
	} else {
		f.settle(next[0], webhookd.ForwardDelivered)
	}
	f.wantStates("v1", "v1", webhookd.ForwardDelivered, webhookd.ForwardDead)
	f.wantStates("v2", "v2", webhookd.ForwardDelivered, webhookd.ForwardDelivered)
	if dead, err := f.deadLetters(forward.Target{Source: source}); err != nil || !slices.Equal(routed(dead), []string{"b/v1"}) {
		t.Errorf("dead letters %v, %v; want b's v1", routed(dead), err)
	}
	if dead, err := f.deadLetters(forward.Target{Source: source, Route: "a"}); err != nil || len(dead) != 0 {
		t.Errorf("dead letters of a: %v, %v; want none", routed(dead), err)
	}
}

// testSupersedePerRoute checks that Claim.Newer speaks of the claimed
// route's lane only.
func testSupersedePerRoute(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.acceptOn("v1", "res", 1, "a", "b")
	f.acceptOn("v2", "res", 2, "a")
	a := f.claimOn("a", "w", 10, time.Minute)
	b := f.claimOn("b", "w", 10, time.Minute)
	if len(a) != 1 || !a[0].Newer {
		t.Fatalf("claimed on a: %+v, want v1 with v2 behind it", a)
	}
	if len(b) != 1 || b[0].Newer {
		t.Fatalf("claimed on b: %+v, want v1 with nothing behind it on b", b)
	}
	f.settle(a[0], webhookd.ForwardSuperseded)
	f.settle(b[0], webhookd.ForwardDelivered)
	f.wantStates("v1", "v1", webhookd.ForwardSuperseded, webhookd.ForwardDelivered)
	if next := f.claimOn("a", "w", 10, time.Minute); len(next) != 1 || next[0].RequestID != "v2" || next[0].Newer {
		t.Errorf("claimed on a %+v, want v2 alone", next)
	}
}

// testListsByTarget checks Outbox and DeadLetters by source, by source
// and route, and for all: a route's name is not a prefix of another's.
func testListsByTarget(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.acceptOn("x", "", 0, "a", "b")
	f.acceptOn("y", "", 0, "b")
	f.acceptOn("z", "", 0, "ab")
	s := f.delivery("s", "", 0, "s")
	s.Source, s.Routes = "shipping", []string{"a"}
	f.decide(s)
	list := func(what string, get pagedList, tg forward.Target, want ...string) {
		t.Helper()
		entries, err := listAll(get, tg, 2)
		var got []string
		for _, e := range entries {
			got = append(got, e.Source+"/"+e.Route+"/"+e.RequestID)
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s of %+v: %v, %v; want %v", what, tg, got, err, want)
		}
	}
	list("outbox", f.b.Outbox, forward.Target{Source: source}, "billing/a/x", "billing/b/x", "billing/b/y", "billing/ab/z")
	list("outbox", f.b.Outbox, forward.Target{Source: source, Route: "b"}, "billing/b/x", "billing/b/y")
	list("outbox", f.b.Outbox, forward.Target{Source: source, Route: "a"}, "billing/a/x")
	list("outbox", f.b.Outbox, forward.Target{Source: source, Route: "c"})
	list("outbox", f.b.Outbox, forward.Target{}, "billing/a/x", "billing/b/x", "billing/b/y", "billing/ab/z", "shipping/a/s")
	for _, tg := range []forward.Target{{Source: source, Route: "a"}, {Source: source, Route: "b"}, {Source: source, Route: "ab"}, {Source: "shipping", Route: "a"}} {
		claims, err := f.b.Claim(ctx, "w", tg, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claims {
			f.settle(c, webhookd.ForwardDead)
		}
	}
	list("dead letters", f.b.DeadLetters, forward.Target{Source: source}, "billing/a/x", "billing/ab/z", "billing/b/x", "billing/b/y")
	list("dead letters", f.b.DeadLetters, forward.Target{Source: source, Route: "a"}, "billing/a/x")
	list("dead letters", f.b.DeadLetters, forward.Target{Source: source, Route: "b"}, "billing/b/x", "billing/b/y")
	list("dead letters", f.b.DeadLetters, forward.Target{Source: "shipping"}, "shipping/a/s")
	list("dead letters", f.b.DeadLetters, forward.Target{}, "billing/a/x", "billing/ab/z", "billing/b/x", "billing/b/y", "shipping/a/s")
	list("outbox", f.b.Outbox, forward.Target{})
}

// testRepairsByRoute checks that retrying and discarding a dead letter
// act on its route only.
func testRepairsByRoute(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.acceptOn("r", "", 0, "a", "b")
	for _, rt := range []string{"a", "b"} {
		c := f.claimOn(rt, "w", 1, time.Minute)
		if len(c) != 1 {
			t.Fatalf("claimed %v on %s", ids(c), rt)
		}
		f.settle(c[0], webhookd.ForwardDead)
	}
	a, b := forward.Target{Source: source, Route: "a"}, forward.Target{Source: source, Route: "b"}
	c := forward.Target{Source: source, Route: "c"}
	wantCode(t, "retry on a route without the dead letter", f.b.RetryDeadLetter(ctx, c, "r"), webhookd.ENOTFOUND)
	wantCode(t, "discard on a route without the dead letter", f.b.DiscardDeadLetter(ctx, c, "r"), webhookd.ENOTFOUND)
	if err := f.b.RetryDeadLetter(ctx, a, "r"); err != nil {
		t.Fatalf("retry on a: %v", err)
	}
	f.wantStates("retried on a", "r", webhookd.ForwardPending, webhookd.ForwardDead)
	if dead, err := f.deadLetters(forward.Target{}); err != nil || !slices.Equal(routed(dead), []string{"b/r"}) {
		t.Errorf("dead letters after retrying a's: %v, %v", routed(dead), err)
	}
	if got := f.claimOn("a", "w", 10, time.Minute); len(got) != 1 || got[0].Attempts != 0 || string(got[0].Body) != `{"id":"r"}` {
		t.Errorf("after retry, claimed on a %+v; want r afresh with its body", got)
	}
	if got := f.claimOn("b", "w", 10, time.Minute); len(got) != 0 {
		t.Errorf("after retrying a's dead letter, claimed %v on b", ids(got))
	}
	if err := f.b.DiscardDeadLetter(ctx, b, "r"); err != nil {
		t.Fatalf("discard on b: %v", err)
	}
	f.wantStates("discarded on b", "r", webhookd.ForwardPending, webhookd.ForwardDiscarded)
	if st := f.status("r", "b"); st.Attempts != 1 {
		t.Errorf("b discarded: %+v, want one attempt", st)
	}
	if dead, err := f.deadLetters(forward.Target{}); err != nil || len(dead) != 0 {
		t.Errorf("dead letters after discarding b's: %v, %v", routed(dead), err)
	}
}

// testRedeliverPerRoute checks Redeliver with a route, and without one:
// every route whose forwarding ended, none that is pending.
func testRedeliverPerRoute(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.acceptOn("r", "res", 1, "a", "b")
	f.settle(f.claimOn("a", "w", 1, time.Minute)[0], webhookd.ForwardDelivered)
	wantCode(t, "redeliver on a pending route", f.b.Redeliver(ctx, source, "r", "b"), webhookd.ECONFLICT)
	wantCode(t, "redeliver on a route it did not take", f.b.Redeliver(ctx, source, "r", "c"), webhookd.ENOTFOUND)
	if err := f.b.Redeliver(ctx, source, "r", ""); err != nil {
		t.Fatalf("redeliver on every route: %v", err)
	}
	f.wantStates("redelivered while b is pending", "r", webhookd.ForwardPending, webhookd.ForwardPending)
	if entries, err := f.outbox(forward.Target{Source: source}); err != nil || !slices.Equal(routed(entries), []string{"b/r", "a/r"}) {
		t.Fatalf("outbox %v, %v; want b's first entry and a's redelivery", routed(entries), err)
	}
	for _, rt := range []string{"a", "b"} {
		c := f.claimOn(rt, "w", 10, time.Minute)
		if len(c) != 1 || string(c[0].Body) != `{"id":"r"}` {
			t.Fatalf("claimed on %s: %+v", rt, c)
		}
		f.settle(c[0], webhookd.ForwardDelivered)
	}
	if err := f.b.Redeliver(ctx, source, "r", "b"); err != nil {
		t.Fatalf("redeliver on b: %v", err)
	}
	f.wantStates("redelivered on b", "r", webhookd.ForwardDelivered, webhookd.ForwardPending)
	f.settle(f.claimOn("b", "w", 1, time.Minute)[0], webhookd.ForwardDelivered)
	if err := f.b.Redeliver(ctx, source, "r", ""); err != nil {
		t.Fatalf("redeliver on every route: %v", err)
	}
	f.wantStates("redelivered on every route", "r", webhookd.ForwardPending, webhookd.ForwardPending)
	if entries, err := f.outbox(forward.Target{Source: source}); err != nil || !slices.Equal(routed(entries), []string{"a/r", "b/r"}) {
		t.Errorf("outbox %v, %v; want r on a and b", routed(entries), err)
	}
	wantCode(t, "redeliver while every route is pending", f.b.Redeliver(ctx, source, "r", ""), webhookd.ECONFLICT)
	for _, rt := range []string{"a", "b"} {
		f.settle(f.claimOn(rt, "w", 1, time.Minute)[0], webhookd.ForwardDelivered)
	}
	f.acceptOn("r2", "res", 2, "a")
	wantCode(t, "redeliver an older version", f.b.Redeliver(ctx, source, "r", ""), webhookd.ECONFLICT)
}
