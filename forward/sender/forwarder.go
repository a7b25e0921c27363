package sender

import (
	"bytes"
	"container/heap"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/internal/ratelog"
	"github.com/webhookd/webhookd/signature"
	"github.com/webhookd/webhookd/tracing"
)

// Route is where and how the entries of one route of a source are
// delivered.
type Route struct {
	URL         string
	Timeout     time.Duration
	Concurrency int
	Policy      forward.RetryPolicy
	// Supersede skips a pending entry whose resource has a newer one pending.
	Supersede bool
	Headers   map[string]string // static headers added to every request
	// PassHeaders names the request headers this route passes through.
	// An entry carries those of every route its delivery matched (see
	// the gateway's intake); each route is sent only its own.
	PassHeaders []string
	// SignSecret, when set (whsec_...), adds Standard Webhooks signature
	// headers, so the downstream can check a request came through webhookd.
	SignSecret string
	// Rate bounds the requests started to the route; Breaker stops
	// sending while it keeps failing. Their zero values are no limit and
	// no breaker.
	Rate    forward.Rate
	Breaker forward.Breaker
	// TLS, when set, is how an https downstream is trusted and how the
	// forwarder proves itself to it; nil is the system's roots, no client
	// certificate.
	TLS *RouteTLS
}

// Backend is what the forwarder needs of a storage backend: its outbox,
// and the route states that pace, stop and pause the sends to each route.
type Backend interface {
	forward.Queue
	forward.Control
}

// Metrics counts forward attempts.
type Metrics interface {
	// Attempted counts one attempt to target; result is delivered, retry
	// or dead.
	Attempted(target forward.Target, result string, took time.Duration)
}

type nopMetrics struct{}

func (nopMetrics) Attempted(forward.Target, string, time.Duration) {}

// Default for Forwarder.PollInterval.
const DefaultPollInterval = time.Second

// leaseMargin is how long a claim outlives its route's timeout: time to
// record the result, and to try again when recording fails.
const leaseMargin = 30 * time.Second

// Forwarder delivers outbox entries downstream, at least once.
//
// It claims entries from the queue, which hands out only the head of each
// (source, route, resource) lane and the next entry only once the head is
// settled, so that no crash can make an older version arrive after a
// newer one at a route's downstream, whichever forwarder sends it. Each
// route of each source (a forward.Target) has its own concurrency limit
// and its own claims, so a slow or failing downstream holds up only its
// own route, never another route of the same source: a target is asked
// for as many entries as it has free slots.
//
// Before each claim the backend's forward.Control grants the sends: as
// many as the route's rate allows, none while it is paused or its breaker
// is open, one probe once the breaker's cool-down ends. The state is the
// backend's, so that replicas sharing it share one budget and one probe.
// After each attempt the forwarder reports whether the downstream
// answered; a failure the breaker does not count leaves its entry's
// attempts as they were.
type Forwarder struct {
	Logger       *zap.Logger
	Metrics      Metrics
	PollInterval time.Duration // a safety net beside Queue.Notify
	// Owner names this forwarder's claims; unique per process by default.
	Owner string
	// Tracer makes a span of each attempt, a child of the span that
	// accepted the entry's delivery (Entry.Trace), and the request
	// carries it as its traceparent; nil, tracing off, makes none. Set
	// before Open.
	Tracer trace.Tracer

	queue   forward.Queue
	control forward.Control
	routes  map[forward.Target]*route
	now     func() time.Time
	jitter  func() float64

	jobs      int      // jobs started and not yet finished; owned by run
	due       dueTimes // retries this forwarder scheduled; owned by run
	fetched   chan claimed
	released  chan *route
	finished  chan outcome
	stop      chan struct{}
	stopOnce  sync.Once
	done      chan struct{}
	ctx       context.Context // aborts dials when shutdown runs out of time (store calls do not watch it)
	cancel    context.CancelFunc
	conns     conns // closed to abort requests in flight
	tlsConfig *tls.Config
	wg        sync.WaitGroup
	// While the queue is down, every route fails a claim and the
	// forwarder a depth read at every poll, and every job in flight a
	// settle each second: each kind is logged as a run (ratelog). The
	// route states are read on every poll, and reported after attempts.
	claimLog, depthLog, settleLog, stateLog, reportLog *ratelog.Failures
}

// outcome is what a job tells the scheduler when it ends.
type outcome struct {
	r *route
	// next is its entry's next attempt, when it was rescheduled.
	next time.Time
	// state is the route's state after the attempt was reported, nil
	// when it was not.
	state *forward.RouteState
	probe bool // the job carried the route's probe
}

// New returns a forwarder for the targets in routes. Entries of a target
// not in routes are dead-lettered: its route was removed from the
// configuration.
func New(b Backend, routes map[forward.Target]Route, logger *zap.Logger) *Forwarder {
	f := &Forwarder{
		Logger:       logger,
		Metrics:      nopMetrics{},
		PollInterval: DefaultPollInterval,
		Owner:        fmt.Sprintf("%d-%016x", os.Getpid(), rand.Uint64()),
		queue:        b,
		control:      b,
		routes:       make(map[forward.Target]*route, len(routes)),
		now:          time.Now,
		jitter:       rand.Float64,
		fetched:      make(chan claimed),
		released:     make(chan *route),
		finished:     make(chan outcome),
		stop:         make(chan struct{}),
		done:         make(chan struct{}),
	}
	for target, r := range routes {
		pass := make([]string, len(r.PassHeaders))
		for i, name := range r.PassHeaders {
			pass[i] = http.CanonicalHeaderKey(name)
		}
		f.routes[target] = &route{Route: r, target: target, passHeaders: pass, ask: true}
	}
	return f
}

// Open sets up each route's connections and starts the scheduler.
func (f *Forwarder) Open() error {
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.claimLog = ratelog.New(f.Logger, zapcore.ErrorLevel, ratelog.DefaultEvery)
	f.depthLog = ratelog.New(f.Logger, zapcore.ErrorLevel, ratelog.DefaultEvery)
	f.settleLog = ratelog.New(f.Logger, zapcore.ErrorLevel, ratelog.DefaultEvery)
	f.stateLog = ratelog.New(f.Logger, zapcore.ErrorLevel, ratelog.DefaultEvery)
	f.reportLog = ratelog.New(f.Logger, zapcore.ErrorLevel, ratelog.DefaultEvery)
	for target, r := range f.routes {
		c, err := f.hostClient(r.Route)
		if err != nil {
			f.cancel()
			close(f.done) // no scheduler to wait for: Close returns at once
			return fmt.Errorf("forward %s: %w", target, err)
		}
		r.client = c
	}
	go f.run()
	return nil
}

// Close stops claiming and waits for requests in flight; when ctx ends
// first it aborts them. An aborted or unsettled entry stays in the outbox
// and is sent again once its claim's lease ends, with the same
// Idempotency-Key.
func (f *Forwarder) Close(ctx context.Context) error {
	f.stopOnce.Do(func() { close(f.stop) })
	select {
	case <-f.done:
	case <-ctx.Done():
		f.cancel()
		f.conns.closeAll()
		<-f.done
	}
	f.wg.Wait()
	f.cancel()
	f.conns.closeAll()
	return nil
}

type route struct {
	Route
	target forward.Target
	// passHeaders is PassHeaders as http.CanonicalHeaderKey spells them,
	// which is how an entry's Headers are keyed.
	passHeaders []string
	client      *fasthttp.HostClient
	orphan      bool // not configured: entries are dead-lettered
	// inflight is the slots taken, against Concurrency: by claims on the
	// wire, and by claimed entries whose downstream request is not
	// answered yet.
	inflight int
	// ask says the queue may hold entries of this route's that no claim
	// has asked for: the queue notified, a poll or a retry came due, or
	// the last claim took all it asked for. A freed slot alone is no
	// reason to ask, so an idle outbox costs no claims between commits.
	ask bool
	// asks counts the reasons to ask the route has had: a claim that
	// finds no more due entries leaves ask unset only when no reason
	// came while it ran.
	asks uint64
	// claiming says the route's claim is out.
	claiming bool
	// wake is when a route the backend's control held back (out of
	// tokens, open, paused) asks again; till then nothing else makes it
	// ask, so a held route costs no grant per commit.
	wake time.Time
	// probing says a job carries the route's probe: the route asks again
	// when it ends.
	probing bool
	// known is the route's state as this forwarder last saw it: read on
	// every poll, and returned by each report. It says how long a held
	// route waits.
	known forward.RouteState

	// reporting serialises this forwarder's reports on the route, so that
	// dirty follows the order in which the store applied them.
	reporting sync.Mutex
	// dirty says the stored state may hold what a success resets: a run
	// of failures, an open breaker. A poll only ever sets it, as a report
	// may have changed the state since the poll read it; a report's
	// answer sets it either way.
	dirty bool
}

// askAgain gives r a reason to ask the queue.
func (r *route) askAgain() { r.ask, r.asks = true, r.asks+1 }

// lease is how long this route's claims last.
func (r *route) lease() time.Duration { return r.Timeout + leaseMargin }

func (f *Forwarder) run() {
	defer close(f.done)
	poll := time.NewTicker(f.PollInterval)
	defer poll.Stop()
	timer := time.NewTimer(f.PollInterval)
	defer timer.Stop()
	stop := f.stop
	stopping, discover := false, true
	for {
		if stopping {
			if f.idle() {
				return
			}
		} else {
			if discover {
				f.discoverOrphans()
				f.readStates()
				discover = false
			}
			f.claim()
			timer.Reset(f.wait())
		}
		select {
		case <-stop:
			stopping, stop = true, nil
		case <-f.queue.Notify():
			f.askAll()
		case <-poll.C:
			discover = true
			f.askAll()
		case c := <-f.fetched:
			f.start(c)
		case r := <-f.released:
			r.inflight--
		case o := <-f.finished:
			f.jobs--
			if !o.next.IsZero() {
				heap.Push(&f.due, o.next)
			}
			f.learn(o)
		case <-timer.C:
			// A held route's wake needs no ask: it kept its own. A due
			// retry may be any route's.
			if f.due.Len() > 0 && !f.due[0].After(f.now()) {
				f.askAll()
			}
		}
	}
}

// idle says no job runs and no claim is out.
func (f *Forwarder) idle() bool {
	if f.jobs > 0 {
		return false
	}
	for _, r := range f.routes {
		if r.claiming {
			return false
		}
	}
	return true
}

// askAll marks every route as having entries to ask for.
func (f *Forwarder) askAll() {
	for _, r := range f.routes {
		r.askAgain()
	}
}

// wait returns how long until the next retry this forwarder scheduled or
// the next held route's wake, at most PollInterval; retries it passed are
// forgotten, as claim just ran.
func (f *Forwarder) wait() time.Duration {
	now := f.now()
	for f.due.Len() > 0 && !f.due[0].After(now) {
		heap.Pop(&f.due)
	}
	d := f.PollInterval
	if f.due.Len() > 0 {
		d = min(d, f.due[0].Sub(now))
	}
	for _, r := range f.routes {
		if r.ask && r.wake.After(now) {
			d = min(d, r.wake.Sub(now))
		}
	}
	return d
}

// readStates refreshes what the forwarder knows of each route's state.
func (f *Forwarder) readStates() {
	states, err := f.control.RouteStates(f.ctx)
	if err != nil {
		f.stateLog.Fail("read route states", zap.Error(err))
		return
	}
	f.stateLog.OK("route states read again")
	for target, r := range f.routes {
		r.known = states[target]
		r.reporting.Lock()
		r.dirty = r.dirty || !clean(r.known)
		r.reporting.Unlock()
	}
}

// learn takes in what a job that ended found out about its route.
func (f *Forwarder) learn(o outcome) {
	r := o.r
	if o.probe {
		r.probing, r.wake = false, time.Time{}
		r.askAgain()
	}
	if o.state == nil {
		return
	}
	was := r.known
	r.known = *o.state
	switch s := o.state; {
	case s.Circuit == forward.Open && !s.OpenUntil.Equal(was.OpenUntil):
		f.Logger.Warn("route's circuit breaker is open: nothing is sent to it until open_until, then one probe",
			zap.String("source", r.target.Source), zap.String("route", r.target.Route),
			zap.Time("open_until", s.OpenUntil), zap.Int("opens", s.Opens))
		r.wake = s.OpenUntil
		r.askAgain()
	case !broken(*s) && broken(was):
		f.Logger.Info("route's circuit breaker closed: sending again",
			zap.String("source", r.target.Source), zap.String("route", r.target.Route))
		r.wake = time.Time{}
		r.askAgain()
	}
}

// discoverOrphans gives every target with pending entries and no route a
// route that dead-letters them.
func (f *Forwarder) discoverOrphans() {
	pending, err := f.queue.Pending(f.ctx)
	if err != nil {
		f.depthLog.Fail("read outbox depth", zap.Error(err))
		return
	}
	f.depthLog.OK("outbox depth read again")
	for target, n := range pending {
		if _, ok := f.routes[target]; !ok && n > 0 {
			f.routes[target] = &route{Route: Route{Concurrency: 1}, target: target, orphan: true, ask: true}
		}
	}
}

// claim starts a claim for every route with entries to ask for, free
// slots and no claim of its own on the wire. Claims run apart from the
// scheduler, so that a queue behind a network (a shared database) answers
// the routes' claims at once, and a route's jobs keep starting and its
// slots freeing while its claim is out. A route has one claim out at a
// time: claims of one route running side by side would pass over each
// other's entries, costing the queue more for the same entries. A claim
// holds the slots it asks for until it returns.
func (f *Forwarder) claim() {
	now := f.now()
	for _, r := range f.routes {
		free := r.Concurrency - r.inflight
		// With jobs in flight, a route asks again once a quarter of its
		// slots are free: the queue then answers one claim for many
		// entries, not one for each.
		if !r.ask || r.claiming || r.probing || now.Before(r.wake) || free <= 0 || (r.inflight > 0 && free < max(1, r.Concurrency/4)) {
			continue
		}
		r.wake = time.Time{}
		r.inflight += free
		r.claiming = true
		f.wg.Add(1)
		go f.fetch(r, free, r.asks)
	}
}

// claimed is what one claim brings back to the scheduler.
type claimed struct {
	r *route
	// asked is how many slots the claim held; asks is the route's asks
	// when it started.
	asked  int
	asks   uint64
	claims []forward.Claim
	// granted is what the route's control granted, probe whether it
	// granted the probe; failed says the grant or the claim failed.
	granted int
	probe   bool
	failed  bool
}

// fetch grants and claims up to n entries of r, and gives back the sends
// granted and not claimed.
func (f *Forwarder) fetch(r *route, n int, asks uint64) {
	defer f.wg.Done()
	c := claimed{r: r, asked: n, asks: asks, granted: n}
	if !r.orphan {
		var err error
		c.granted, c.probe, err = f.control.Grant(f.ctx, f.Owner, r.target, n, r.Rate, r.lease())
		if err != nil {
			f.claimLog.Fail("grant sends to a route", zap.String("source", r.target.Source), zap.String("route", r.target.Route), zap.Error(err))
			c.failed, c.granted = true, 0
		}
	}
	if c.granted > 0 {
		var err error
		c.claims, err = f.queue.Claim(f.ctx, f.Owner, r.target, c.granted, r.lease())
		if err != nil {
			f.claimLog.Fail("claim outbox entries", zap.String("source", r.target.Source), zap.String("route", r.target.Route), zap.Error(err))
			c.failed = true
		} else {
			f.claimLog.OK("claims succeed again")
		}
		f.release(r, c.granted-len(c.claims), c.probe && len(c.claims) == 0)
	}
	f.fetched <- c
}

// start takes in what a claim brought back: it gives back the slots the
// claim did not fill, says when the route asks again, and starts a job
// for each entry claimed.
func (f *Forwarder) start(c claimed) {
	r := c.r
	r.claiming = false
	r.inflight -= c.asked - len(c.claims)
	now := f.now()
	switch {
	case c.failed:
		// The queue or the control is down: ask again at the next poll,
		// not at every wake-up.
		r.ask, r.wake = true, now.Add(f.PollInterval)
	case c.granted == 0:
		f.hold(r, now, c.asked)
	case len(c.claims) < c.granted:
		// The queue held no more that were due when the claim ran;
		// unless asked again since, the route waits for a reason to ask.
		if r.asks == c.asks {
			r.ask = false
		}
	case c.granted < c.asked:
		f.hold(r, now, c.asked-c.granted)
	default:
		r.ask = true // it took all it asked for: more may be due
	}
	j := job{probe: c.probe && len(c.claims) > 0} // a probe is a grant of one send
	r.probing = j.probe
	for _, cl := range c.claims {
		f.jobs++
		f.wg.Add(1)
		go f.work(r, cl, j)
	}
}

// hold sets when route r, granted short sends fewer than it asked for,
// asks again: when its breaker's cool-down ends; when its bucket holds
// the sends it lacks (at most a burst's worth); else (paused, or another
// forwarder's probe out) at the next poll, which reads the state again.
func (f *Forwarder) hold(r *route, now time.Time, short int) {
	r.ask = true
	switch s := r.known; {
	case s.Paused:
		r.wake = now.Add(f.PollInterval)
	case s.Circuit == forward.Open && s.OpenUntil.After(now):
		r.wake = s.OpenUntil
	case !broken(s) && r.Rate.Limit > 0:
		tokens := max(1, min(short, r.Rate.Burst))
		r.wake = now.Add(time.Duration(float64(tokens) / r.Rate.Limit * float64(time.Second)))
	default:
		r.wake = now.Add(f.PollInterval)
	}
}

// release gives back sends granted to r and not made.
func (f *Forwarder) release(r *route, unused int, probe bool) {
	if r.orphan || unused <= 0 {
		return
	}
	if err := f.control.Release(f.ctx, f.Owner, r.target, unused, probe, r.Rate); err != nil {
		f.claimLog.Fail("release unused sends", zap.String("source", r.target.Source), zap.String("route", r.target.Route), zap.Error(err))
	}
}

// work runs one claim. It frees the claim's downstream slot as soon as the
// request is answered, before the result is on disk: forwarding throughput
// is then bounded by the downstream, not by commit latency. The lane stays
// claimed until the result is on disk, which is what ordering needs.
func (f *Forwarder) work(r *route, c forward.Claim, j job) {
	defer f.wg.Done()
	released := false
	release := func() {
		if !released {
			released = true
			f.released <- r
		}
	}
	o := outcome{r: r, probe: j.probe}
	if res, ok := f.result(r, &c, &j, release); ok && f.record(r, &c, res) && res.State == webhookd.ForwardRetrying {
		o.next = res.NextAttemptAt
	}
	o.state = j.state
	release()
	f.finished <- o
}

// job is what one claim's attempt knows of its route, and learns.
type job struct {
	probe bool                // it carries the route's probe
	state *forward.RouteState // after the attempt's report
}

// clean says a success would leave s as it is: closed, with no failure
// counted.
func clean(s forward.RouteState) bool {
	return !broken(s) && s.Failures == 0 && s.Opens == 0
}

// broken says s's breaker is open or probing.
func broken(s forward.RouteState) bool {
	return s.Circuit == forward.Open || s.Circuit == forward.HalfOpen
}

// result is what became of c: superseded, dead without an attempt, or
// the attempt's outcome. ok is false when the attempt was abandoned
// because the forwarder is closing. A claim settled without a send gives
// its send back to the route, the probe with it.
func (f *Forwarder) result(r *route, c *forward.Claim, j *job, release func()) (res forward.Result, ok bool) {
	now := f.now()
	var unsent forward.Result
	switch {
	case r.orphan:
		unsent = forward.Result{State: webhookd.ForwardDead, Attempts: c.Attempts, Error: fmt.Sprintf("source %q has no route %q in the configuration", c.Source, c.Route), At: now}
	case r.Supersede && c.Newer:
		unsent = forward.Result{State: webhookd.ForwardSuperseded, Attempts: c.Attempts, At: now}
	case c.Body == nil:
		unsent = forward.Result{State: webhookd.ForwardDead, Attempts: c.Attempts, Error: "its payload expired (receipt_ttl) before it could be forwarded", At: now}
	default:
		res, ok = f.attempt(r, &c.Entry, j)
		release()
		return res, ok
	}
	if j.probe || r.Rate.Limit > 0 {
		f.release(r, 1, j.probe)
	}
	return unsent, true
}

// record settles c with res. A Settle that failed may have been recorded
// all the same; settling the claim again is then a no-op, so the attempt
// is recorded again, not sent again, until the queue takes it or the
// forwarder closes. ok is false when it was not recorded by this claim.
func (f *Forwarder) record(r *route, c *forward.Claim, res forward.Result) (ok bool) {
	for {
		err := f.queue.Settle(f.ctx, *c, res)
		switch {
		case err == nil:
			f.settleLog.OK("forward results recorded again")
			return true
		case errors.Is(err, forward.ErrLeaseLost):
			f.Logger.Warn("claim lost before its result was recorded: another owner forwards the entry", zap.String("source", c.Source), zap.String("route", c.Route), zap.String("request_id", c.RequestID))
			return false
		}
		f.settleLog.Fail("settle forward attempt", zap.String("source", c.Source), zap.String("route", c.Route), zap.String("request_id", c.RequestID), zap.Error(err))
		select {
		case <-time.After(max(r.Policy.Initial, time.Second)):
		case <-f.stop:
			return false
		}
	}
}

// attempt sends e once, and reports the outcome to the route's state. ok
// is false when the attempt was abandoned because the forwarder is
// closing.
func (f *Forwarder) attempt(r *route, e *forward.Entry, j *job) (res forward.Result, ok bool) {
	n := e.Attempts + 1
	start := time.Now()
	var span trace.Span
	traceparent := ""
	if f.Tracer != nil {
		_, span = f.Tracer.Start(tracing.Parent(f.ctx, e.Trace), "forward", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithTimestamp(start), trace.WithAttributes(
				attribute.String("webhookd.source", e.Source),
				attribute.String("webhookd.route", e.Route),
				attribute.String("webhookd.request_id", e.RequestID),
				attribute.Int("webhookd.attempt", n)))
		traceparent = tracing.Traceparent(span.SpanContext())
		defer func() { endAttempt(span, &res) }()
	}
	status, retryAfter, body, err := f.post(r, e, n, traceparent)
	took := time.Since(start)
	now := f.now()
	if err != nil && f.ctx.Err() != nil {
		return forward.Result{}, false
	}
	res = forward.Result{State: webhookd.ForwardDelivered, Attempts: n, Status: status, At: now}
	// The attempt's fields are built only for a line that is written:
	// Logger.With encodes them at once.
	log := func(level zapcore.Level, msg string, more ...zap.Field) {
		if line := f.Logger.Check(level, msg); line != nil {
			line.Write(append([]zap.Field{zap.String("source", e.Source), zap.String("route", e.Route), zap.String("request_id", e.RequestID),
				zap.String("resource", e.Resource), zap.String("version", e.Version),
				zap.Int("attempt", n), zap.Int("status", status)}, more...)...)
		}
	}
	if err != nil {
		res.Error = err.Error()
	} else if status >= 300 {
		res.Error = fmt.Sprintf("downstream answered %d %s", status, http.StatusText(status))
		if body != "" {
			res.Error += ": " + body
		}
	}
	verdict := forward.Judge(status)
	counted := f.report(r, verdict != forward.Retry, j)
	switch verdict {
	case forward.Delivered:
		f.Metrics.Attempted(r.target, "delivered", took)
		log(zapcore.DebugLevel, "forwarded")
		return res, true
	case forward.Retry:
		if !counted {
			// The route is down, which is no fault of the entry's: it
			// keeps its attempts and waits for the breaker.
			f.Metrics.Attempted(r.target, "retry", took)
			res.State, res.Attempts = webhookd.ForwardRetrying, e.Attempts
			res.NextAttemptAt = now.Add(r.Policy.Delay(n, retryAfter, f.jitter()))
			if j.state != nil && j.state.OpenUntil.After(res.NextAttemptAt) {
				res.NextAttemptAt = j.state.OpenUntil
			}
			log(zapcore.InfoLevel, "forward failed while the route's circuit breaker is open, will retry; the attempt does not count", zap.String("error", res.Error), zap.Time("next_attempt_at", res.NextAttemptAt))
			return res, true
		}
		if n < r.Policy.MaxAttempts {
			f.Metrics.Attempted(r.target, "retry", took)
			res.State = webhookd.ForwardRetrying
			res.NextAttemptAt = now.Add(r.Policy.Delay(n, retryAfter, f.jitter()))
			log(zapcore.InfoLevel, "forward failed, will retry", zap.String("error", res.Error), zap.Time("next_attempt_at", res.NextAttemptAt))
			return res, true
		}
		res.Error = fmt.Sprintf("%s; gave up after %d attempts", res.Error, n)
	}
	f.Metrics.Attempted(r.target, "dead", took)
	res.State = webhookd.ForwardDead
	log(zapcore.WarnLevel, "forward dead-lettered", zap.String("error", res.Error))
	return res, true
}

// endAttempt names on an attempt's span how it ended: the downstream's
// status, and the forward state it left its entry in. An attempt cut
// short by shutdown has neither.
func endAttempt(span trace.Span, res *forward.Result) {
	if res.State != "" {
		span.SetAttributes(attribute.String("webhookd.result", string(res.State)))
	}
	if res.Status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", res.Status))
	}
	if res.Error != "" {
		span.SetStatus(codes.Error, res.Error)
	}
	span.End()
}

// report tells the route's state whether the downstream answered (up),
// and returns whether a failure counts against its entry. A success is
// reported only when it may change something: it ends a probe, or a run
// of failures this forwarder knows of, so that a healthy route costs no
// write per delivery; a failure only when the breaker is on, or its
// state may be left over from when it was. When the report fails, the
// failure counts, as it would without a breaker.
func (f *Forwarder) report(r *route, up bool, j *job) (counted bool) {
	r.reporting.Lock()
	defer r.reporting.Unlock()
	if !j.probe && !r.dirty && (up || r.Breaker.Failures <= 0) {
		return true
	}
	state, counted, err := f.control.Report(f.ctx, r.target, up, r.Breaker)
	if err != nil {
		f.reportLog.Fail("report an attempt to the route's state", zap.String("source", r.target.Source), zap.String("route", r.target.Route), zap.Error(err))
		return true
	}
	f.reportLog.OK("route states reported again")
	r.dirty = !clean(state)
	j.state = &state
	return counted
}

// post sends one attempt; status is 0 when no answer came, and body is
// the start of the answer's body when its status is not 2xx (see
// snippet). A redirect is not followed: it is the downstream's
// configuration error, not something to replay a body to.
func (f *Forwarder) post(r *route, e *forward.Entry, attempt int, traceparent string) (status int, retryAfter time.Duration, body string, err error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(r.URL)
	req.Header.SetMethod(http.MethodPost)
	req.Header.SetNoDefaultContentType(true)
	for _, name := range r.passHeaders {
		if v, ok := e.Headers[name]; ok {
			setHeader(req, name, v)
		}
	}
	for k, v := range r.Headers {
		setHeader(req, k, v)
	}
	if e.ContentType != "" {
		req.Header.SetContentType(e.ContentType)
	}
	req.Header.Set("Idempotency-Key", e.RequestID)
	req.Header.Set("Webhook-Source", e.Source)
	req.Header.Set("Webhook-Route", e.Route)
	req.Header.Set("Webhook-Attempt", strconv.Itoa(attempt))
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	if e.Resource != "" {
		req.Header.Set("Webhook-Resource", e.Resource)
	}
	if e.Version != "" {
		req.Header.Set("Webhook-Version", e.Version)
	}
	if r.SignSecret != "" {
		signed, err := signature.SignStandard(r.SignSecret, e.RequestID, f.now(), e.Body)
		if err != nil {
			return 0, 0, "", fmt.Errorf("sign: %w", err)
		}
		for k, v := range signed {
			req.Header.Set(k, v)
		}
	}
	req.SetBodyRaw(e.Body)
	deadline := time.Now().Add(r.Timeout)
	err = r.client.DoDeadline(req, resp, deadline)
	if err != nil && idleLost(resp) && f.ctx.Err() == nil {
		// The downstream closed a kept-alive connection while it was idle,
		// and the request went out on it: send it again at once, within
		// this attempt and its time. fasthttp hands out the idle connection
		// used last, so the others have been idle longer: they are closed,
		// and the send dials afresh. A downstream that read the request and
		// closed the connection without a byte of answer gets it twice,
		// with the same Idempotency-Key and Webhook-Attempt: forwarding is
		// at least once, and the key is there for this (Go's own client
		// resends a request with an Idempotency-Key in this case too).
		r.client.CloseIdleConnections()
		err = r.client.DoDeadline(req, resp, deadline)
	}
	if err != nil && !errors.Is(err, fasthttp.ErrBodyTooLarge) {
		return 0, 0, "", refusal(resp, err)
	}
	status = resp.StatusCode()
	if status >= 300 && err == nil {
		body = snippet(resp.Body())
	}
	return status, forward.RetryAfter(string(resp.Header.Peek("Retry-After")), f.now()), body, nil
}

// maxSnippet bounds how much of an answer's body a failed attempt's error
// quotes.
const maxSnippet = 256

// snippet quotes the start of an answer's body for an error: at most
// maxSnippet bytes of it, valid UTF-8 (a character the limit cuts is left
// out, invalid bytes become U+FFFD), on one line (runs of white space
// become one space), control characters escaped, and "…" when it goes on.
func snippet(body []byte) string {
	more := len(body) > maxSnippet
	if more {
		body = body[:maxSnippet]
	}
	body = bytes.TrimSpace(body)
	var b strings.Builder
	space := false
	for len(body) > 0 {
		c, size := utf8.DecodeRune(body)
		if c == utf8.RuneError && size == 1 && more && !utf8.FullRune(body) {
			break
		}
		body = body[size:]
		switch {
		case unicode.IsSpace(c):
			space = true
			continue
		case space:
			b.WriteByte(' ')
			space = false
		}
		switch {
		case c == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		case unicode.IsControl(c):
			fmt.Fprintf(&b, "\\u%04x", c)
		default:
			b.WriteRune(c)
		}
	}
	if more {
		b.WriteString("…")
	}
	return b.String()
}

// setHeader sets a configured or passed-through header. Those that frame
// the request on the wire are the client's to set, and are left out.
func setHeader(req *fasthttp.Request, k, v string) {
	switch http.CanonicalHeaderKey(k) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Upgrade", "Te", "Trailer",
		"Proxy-Authorization", "Proxy-Authenticate", "Proxy-Connection":
		return
	}
	req.Header.Set(k, v)
}

// dueTimes is a min-heap of times.
type dueTimes []time.Time

func (h dueTimes) Len() int           { return len(h) }
func (h dueTimes) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h dueTimes) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueTimes) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *dueTimes) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
