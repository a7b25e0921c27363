// Package storetest is the conformance suite of webhookd's storage
// contract, storage.Backend: every backend's tests call Run, and a backend
// is correct when it passes. It checks what the gateway, the admin API,
// the console and the forwarder rely on, through the contract only.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
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
		{"CountsBySource", testCountsBySource},
		{"NotifiedOfNewEntries", testNotify},
		{"RedeliverRetryDiscard", testRepairs},
		{"DurableAcrossReopen", testDurable},
		{"TwoForwarders", testTwoForwarders},
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

const source = "billing"

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

// delivery is a forwarded delivery of requestID; version 0 is none.
func (f *fixture) delivery(requestID, resource string, version uint64, body string) webhookd.Delivery {
	d := webhookd.Delivery{
		Source: source, RequestID: requestID, DeliveryID: "d-" + requestID, Resource: resource,
		Fingerprint: "sha-" + body, ReceivedAt: f.clock.Now(), Forward: true, Body: []byte(body), ContentType: "application/json",
	}
	if version > 0 {
		d.Version, d.VersionOrder = strconv.FormatUint(version, 10), version
	}
	return d
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
	claims, err := f.b.Claim(ctx, owner, source, n, lease)
	if err != nil {
		f.t.Fatal(err)
	}
	return claims
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
		if r := f.receipt(s.d.RequestID); (r.Forward.State == webhookd.ForwardPending) != s.pending {
			t.Errorf("step %d, %s: forward %s, pending %v", i, s.d.RequestID, r.Forward.State, s.pending)
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
	entries, err := f.b.Outbox(ctx, source)
	if err != nil || len(entries) != 3 {
		t.Errorf("outbox %+v, %v; want the three accepted", entries, err)
	}
	unforwarded := f.delivery("quiet", "", 0, "q")
	unforwarded.Forward = false
	f.decide(unforwarded)
	if r := f.receipt("quiet"); r.Decision != webhookd.Accepted || r.Forward.State != webhookd.ForwardNone {
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
	if entries, _ := f.b.Outbox(ctx, ""); len(entries) != 1 {
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
	entries, err := f.b.Outbox(ctx, source)
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
	if entries, err := f.b.Outbox(ctx, source); err != nil || len(entries) != 1 || entries[0].RequestID != "before" {
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
	_, err = f.b.Claim(ctx, "a", source, 1, time.Minute)
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
	if n, err := f.b.Pending(ctx); err != nil || n[source] != 6 {
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
	if r := f.receipt("a2"); r.Forward.State != webhookd.ForwardSuperseded {
		t.Errorf("a2: %+v", r.Forward)
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
	if entries, _ := f.b.Outbox(ctx, ""); len(entries) != 0 {
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
		if r := f.receipt(c.RequestID); r.Forward.State != states[i] || r.Forward.Attempts != 1 {
			t.Errorf("%s: %+v, want %s after one attempt", c.RequestID, r.Forward, states[i])
		}
	}
	entries, _ := f.b.Outbox(ctx, "")
	dead, _ := f.b.DeadLetters(ctx, "")
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
	if r := f.receipt("req-2"); r.Forward.State != webhookd.ForwardDelivered || r.Forward.Attempts != 2 {
		t.Errorf("req-2: %+v", r.Forward)
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
	dead, err := f.b.DeadLetters(ctx, source)
	if err != nil || len(dead) != 1 || !dead[0].BodyLost {
		t.Fatalf("dead letters %+v, %v; want one with its body lost", dead, err)
	}
	wantCode(t, "retrying a dead letter without a body", f.b.RetryDeadLetter(ctx, source, "req-1"), webhookd.ECONFLICT)

	// One sent with its body before the payload expired keeps that body.
	f.accept("req-2", "", 0)
	sent := f.claim("a", 1, time.Minute)
	f.clock.Advance(f.cfg.ReceiptTTL + time.Minute)
	if err := f.b.Settle(ctx, sent[0], forward.Result{State: webhookd.ForwardDead, Attempts: 1, Status: 400, At: f.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := f.b.RetryDeadLetter(ctx, source, "req-2"); err != nil {
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
	if dead, err := f.b.DeadLetters(ctx, source); err != nil || len(dead) != 1 || !dead[0].BodyLost {
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

// testCountsBySource checks Pending and DeadLetterCounts, which metrics
// read: by source, a source with none absent.
func testCountsBySource(t *testing.T, open Open) {
	f := newFixture(t, open)
	accept := func(src, requestID string) {
		t.Helper()
		d := f.delivery(requestID, "", 0, requestID)
		d.Source = src
		if out := f.decide(d); out.Decision != webhookd.Accepted {
			t.Fatalf("%s/%s: %s, want accepted", src, requestID, out.Decision)
		}
	}
	counts := func(what string, get func() (map[string]int, error), want map[string]int) {
		t.Helper()
		got, err := get()
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("%s: %v, %v; want %v", what, got, err, want)
		}
	}
	pending := func() (map[string]int, error) { return f.b.Pending(ctx) }
	counts("pending when empty", pending, map[string]int{})
	counts("dead letters when empty", f.b.DeadLetterCounts, map[string]int{})
	for _, id := range []string{"a", "b", "c"} {
		accept(source, id)
	}
	accept("shipping", "s")
	counts("pending", pending, map[string]int{source: 3, "shipping": 1})
	for _, c := range f.claim("x", 2, time.Minute) {
		f.settle(c, webhookd.ForwardDead)
	}
	claims, err := f.b.Claim(ctx, "x", "shipping", 1, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim shipping: %+v, %v", claims, err)
	}
	f.settle(claims[0], webhookd.ForwardDelivered)
	counts("pending after settling", pending, map[string]int{source: 1})
	counts("dead letters", f.b.DeadLetterCounts, map[string]int{source: 2})
	if err := f.b.DiscardDeadLetter(ctx, source, "a"); err != nil {
		t.Fatal(err)
	}
	if err := f.b.RetryDeadLetter(ctx, source, "b"); err != nil {
		t.Fatal(err)
	}
	counts("dead letters after discard and retry", f.b.DeadLetterCounts, map[string]int{})
	counts("pending after retry", pending, map[string]int{source: 2})
}

func testRepairs(t *testing.T, open Open) {
	f := newFixture(t, open)
	f.accept("v1", "sub", 1)
	wantCode(t, "redeliver pending", f.b.Redeliver(ctx, source, "v1"), webhookd.ECONFLICT)
	wantCode(t, "redeliver unknown", f.b.Redeliver(ctx, source, "never"), webhookd.ENOTFOUND)
	f.settle(f.claim("a", 1, time.Minute)[0], webhookd.ForwardDelivered)
	if err := f.b.Redeliver(ctx, source, "v1"); err != nil {
		t.Fatalf("redeliver delivered: %v", err)
	}
	if r := f.receipt("v1"); r.Forward.State != webhookd.ForwardPending {
		t.Errorf("after redeliver: %+v", r.Forward)
	}
	f.settle(f.claim("a", 1, time.Minute)[0], webhookd.ForwardDelivered)
	f.accept("v2", "sub", 2)
	wantCode(t, "redeliver an older version", f.b.Redeliver(ctx, source, "v1"), webhookd.ECONFLICT)
	stale := f.delivery("v0", "sub", 1, "0")
	f.decide(stale)
	wantCode(t, "redeliver stale", f.b.Redeliver(ctx, source, "v0"), webhookd.ECONFLICT)
	quiet := f.delivery("quiet", "", 0, "q")
	quiet.Forward = false
	f.decide(quiet)
	wantCode(t, "redeliver unforwarded", f.b.Redeliver(ctx, source, "quiet"), webhookd.ECONFLICT)

	f.settle(f.claim("a", 1, time.Minute)[0], webhookd.ForwardDead) // v2
	wantCode(t, "redeliver a dead letter", f.b.Redeliver(ctx, source, "v2"), webhookd.ECONFLICT)
	wantCode(t, "retry unknown", f.b.RetryDeadLetter(ctx, source, "never"), webhookd.ENOTFOUND)
	wantCode(t, "discard unknown", f.b.DiscardDeadLetter(ctx, source, "never"), webhookd.ENOTFOUND)
	if err := f.b.RetryDeadLetter(ctx, source, "v2"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if r := f.receipt("v2"); r.Forward.State != webhookd.ForwardPending {
		t.Errorf("after retry: %+v", r.Forward)
	}
	c := f.claim("a", 1, time.Minute)
	if len(c) != 1 || c[0].RequestID != "v2" || c[0].Attempts != 0 {
		t.Fatalf("after retry, claimed %+v", c)
	}
	f.settle(c[0], webhookd.ForwardDead)
	if err := f.b.DiscardDeadLetter(ctx, source, "v2"); err != nil {
		t.Fatal(err)
	}
	if r := f.receipt("v2"); r.Forward.State != webhookd.ForwardDiscarded || r.Forward.Attempts != 1 {
		t.Errorf("after discard: %+v", r.Forward)
	}
	if dead, _ := f.b.DeadLetters(ctx, ""); len(dead) != 0 {
		t.Errorf("dead letters after discard: %+v", dead)
	}
	// Discarding ends the attempts only: the receipt keeps the payload, and
	// a redelivery sends it again.
	if err := f.b.Redeliver(ctx, source, "v2"); err != nil {
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
	if r := f.receipt("v1"); r.Forward.State != webhookd.ForwardDelivered {
		t.Errorf("v1 after reopen: %+v", r.Forward)
	}
	if l, err := f.b.Latest(ctx, source, "sub"); err != nil || l.Version != "2" {
		t.Errorf("latest after reopen: %+v, %v", l, err)
	}
	if dead, _ := f.b.DeadLetters(ctx, ""); len(dead) != 1 || dead[0].RequestID != "x" {
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

func testTwoForwarders(t *testing.T, open Open) {
	b := open(t, Config{Dir: t.TempDir(), Now: time.Now, ReceiptTTL: time.Hour})
	var mu sync.Mutex
	got := make(map[string][]int)
	var calls atomic.Int32
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if calls.Add(1)%7 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable) // some retries
			return
		}
		v, _ := strconv.Atoi(r.Header.Get("Webhook-Version"))
		mu.Lock()
		got[r.Header.Get("Webhook-Resource")] = append(got[r.Header.Get("Webhook-Resource")], v)
		mu.Unlock()
	}))
	defer down.Close()
	route := sender.Route{URL: down.URL, Timeout: 5 * time.Second, Concurrency: 4,
		Policy: forward.RetryPolicy{MaxAttempts: 100, Initial: time.Millisecond, Max: 10 * time.Millisecond}}
	var fwds []*sender.Forwarder
	for i := range 2 {
		fw := sender.New(b, map[string]sender.Route{source: route}, zap.NewNop())
		fw.Owner, fw.PollInterval = fmt.Sprint("forwarder-", i), 20*time.Millisecond
		if err := fw.Open(); err != nil {
			t.Fatal(err)
		}
		fwds = append(fwds, fw)
	}
	const resources, versions = 5, 20
	for v := 1; v <= versions; v++ {
		for r := range resources {
			d := webhookd.Delivery{Source: source, RequestID: fmt.Sprintf("r%d-v%d", r, v), Resource: fmt.Sprint("res-", r),
				Version: strconv.Itoa(v), VersionOrder: uint64(v), Fingerprint: fmt.Sprint(r, v), ReceivedAt: time.Now(),
				Forward: true, Body: []byte("{}")}
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
		if n[source] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries still pending", n[source])
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, fw := range fwds {
		fw.Close(ctx)
	}
	mu.Lock()
	defer mu.Unlock()
	for r := range resources {
		seen := got[fmt.Sprint("res-", r)]
		if !slices.IsSorted(seen) {
			t.Errorf("res-%d arrived as %v, out of order", r, seen)
		}
		if len(slices.Compact(slices.Clone(seen))) != versions {
			t.Errorf("res-%d: %d distinct versions delivered, want %d", r, len(slices.Compact(slices.Clone(seen))), versions)
		}
	}
}
