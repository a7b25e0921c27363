package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

// Gauges are read when Prometheus scrapes, so they are never stale.
type Gauges struct {
	// Routes are the configured routes of every source: each gets a
	// series, zero or not, so that an alert on growth has a series to
	// watch from the start.
	Routes []forward.Target
	// OutboxPending returns the entries waiting to be forwarded, by route.
	OutboxPending func() (map[forward.Target]int, error)
	// DeadLetters returns the dead letters, by route.
	DeadLetters func() (map[forward.Target]int, error)
	// RouteStates returns the stored state of each route that has one
	// (forward.Control.RouteStates); the others are closed and unpaused.
	// Nil leaves the route state gauges out.
	RouteStates func() (map[forward.Target]forward.RouteState, error)
	// Rates are the configured routes' rate limits; a route without one
	// is absent, and has no rate gauge.
	Rates map[forward.Target]forward.Rate
	// StoreSizes returns the Badger LSM tree and value log sizes in bytes.
	// It and Disk are nil when the backend is not Badger, and their gauges
	// are left out.
	StoreSizes func() (lsm, vlog int64)
	// Disk returns the data directory's free space as the store last read it.
	Disk func() Disk
}

// Disk is the data directory's free space and the reserve kept in it.
type Disk struct {
	Free    int64  // free bytes
	Ballast int64  // bytes of the ballast, which webhookd frees when space runs low
	Reserve int64  // new decisions are refused while Free+Ballast is under it
	Low     bool   // they are refused now
	Lows    uint64 // how often the space ran under the reserve since start
}

// Metrics holds webhookd's collectors in their own registry.
type Metrics struct {
	registry        *prometheus.Registry
	deliveries      *prometheus.CounterVec
	rejections      *prometheus.CounterVec
	intake          *prometheus.HistogramVec
	forwardAttempts *prometheus.CounterVec
	forwardDuration *prometheus.HistogramVec
	filterFailures  *prometheus.CounterVec
}

// New registers webhookd's metrics, the Go runtime's and the process's,
// and the gauges g reads.
func New(g Gauges) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhookd_deliveries_total",
			Help: "Deliveries decided, by source and decision.",
		}, []string{"source", "decision"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhookd_rejections_total",
			Help: "Requests refused before a decision, by source and reason (signature, invalid, too_large, encoding, timeout, unknown_source, unavailable, internal).",
		}, []string{"source", "reason"}),
		intake: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "webhookd_intake_duration_seconds",
			Help: "Time from request to answer on the public listener, including the durable commit, by source.",
			// Fine enough between 5 and 25 ms to check a p99 objective in that range.
			Buckets: []float64{.0005, .001, .0025, .005, .0075, .01, .015, .02, .025, .05, .1, .25, .5, 1},
		}, []string{"source"}),
		forwardAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhookd_forward_attempts_total",
			Help: "Forward attempts, by source, route and result (delivered, retry, dead).",
		}, []string{"source", "route", "result"}),
		forwardDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "webhookd_forward_duration_seconds",
			Help:    "Duration of forward attempts to the downstream, by source and route.",
			Buckets: prometheus.DefBuckets,
		}, []string{"source", "route"}),
		filterFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhookd_filter_failures_total",
			Help: "Deliveries on which a route's filter failed (the route did not take them), by source and route.",
		}, []string{"source", "route"}),
	}
	m.registry.MustRegister(
		m.deliveries, m.rejections, m.intake, m.forwardAttempts, m.forwardDuration, m.filterFailures,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		gauges{g},
	)
	return m
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Decided counts one decided delivery.
func (m *Metrics) Decided(source string, d webhookd.Decision) {
	m.deliveries.WithLabelValues(source, string(d)).Inc()
}

// Rejected counts one request refused before a decision.
func (m *Metrics) Rejected(source, reason string) {
	m.rejections.WithLabelValues(source, reason).Inc()
}

// Answered observes how long the public listener took to answer.
func (m *Metrics) Answered(source string, took time.Duration) {
	m.intake.WithLabelValues(source).Observe(took.Seconds())
}

// FilterFailed counts one delivery on which route's filter failed.
func (m *Metrics) FilterFailed(source, route string) {
	m.filterFailures.WithLabelValues(source, route).Inc()
}

// Attempted counts one forward attempt to target.
func (m *Metrics) Attempted(target forward.Target, result string, took time.Duration) {
	m.forwardAttempts.WithLabelValues(target.Source, target.Route, result).Inc()
	m.forwardDuration.WithLabelValues(target.Source, target.Route).Observe(took.Seconds())
}

var (
	pendingDesc = prometheus.NewDesc("webhookd_outbox_pending", "Accepted deliveries waiting to be forwarded, by source and route.", []string{"source", "route"}, nil)
	deadDesc    = prometheus.NewDesc("webhookd_dead_letters", "Dead letters waiting for an operator, by source and route.", []string{"source", "route"}, nil)
	lsmDesc     = prometheus.NewDesc("webhookd_badger_lsm_bytes", "Size of Badger's LSM tree on disk.", nil, nil)
	vlogDesc    = prometheus.NewDesc("webhookd_badger_vlog_bytes", "Size of Badger's value log on disk.", nil, nil)
	freeDesc    = prometheus.NewDesc("webhookd_disk_free_bytes", "Free space of the data directory's filesystem.", nil, nil)
	ballastDesc = prometheus.NewDesc("webhookd_disk_ballast_bytes", "Space webhookd holds in its ballast file and frees when space runs low; counted as free against the reserve.", nil, nil)
	reserveDesc = prometheus.NewDesc("webhookd_disk_reserve_bytes", "Free space (ballast included) below which new decisions are refused (storage.min_free).", nil, nil)
	lowDesc     = prometheus.NewDesc("webhookd_disk_low", "1 while new decisions are refused for lack of free space in the data directory, else 0.", nil, nil)
	lowsDesc    = prometheus.NewDesc("webhookd_disk_low_total", "Times the free space of the data directory ran under the reserve.", nil, nil)
	circuitDesc = prometheus.NewDesc("webhookd_route_circuit", "1 for the state the route's circuit breaker is in (closed, open or half-open), 0 for the others, by source and route.", []string{"source", "route", "state"}, nil)
	pausedDesc  = prometheus.NewDesc("webhookd_route_paused", "1 while the route is paused (nothing is sent to it), else 0, by source and route.", []string{"source", "route"}, nil)
	rateDesc    = prometheus.NewDesc("webhookd_route_rate_limit", "The route's rate limit in requests per second, by source and route; absent for a route without one.", []string{"source", "route"}, nil)
)

// circuits are the states webhookd_route_circuit has a series for.
var circuits = []forward.Circuit{forward.Closed, forward.Open, forward.HalfOpen}

// gauges reads Gauges at scrape time.
type gauges struct{ Gauges }

func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- deadDesc
	ch <- lsmDesc
	ch <- vlogDesc
	ch <- freeDesc
	ch <- ballastDesc
	ch <- reserveDesc
	ch <- lowDesc
	ch <- lowsDesc
	ch <- circuitDesc
	ch <- pausedDesc
	ch <- rateDesc
}

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	// Without the store these gauges are left out: an invalid metric would
	// make the whole scrape a 500, counters included, just when
	// rejections_total{reason="unavailable"} is what an alert needs.
	if pending, err := g.OutboxPending(); err == nil {
		g.perRoute(ch, pendingDesc, pending)
	}
	if dead, err := g.DeadLetters(); err == nil {
		g.perRoute(ch, deadDesc, dead)
	}
	for t, r := range g.Rates {
		ch <- prometheus.MustNewConstMetric(rateDesc, prometheus.GaugeValue, r.Limit, t.Source, t.Route)
	}
	if g.RouteStates != nil {
		if states, err := g.RouteStates(); err == nil {
			g.routeStates(ch, states)
		}
	}
	if g.StoreSizes == nil { // not Badger: the disk is the database's to watch
		return
	}
	lsm, vlog := g.StoreSizes()
	ch <- prometheus.MustNewConstMetric(lsmDesc, prometheus.GaugeValue, float64(lsm))
	ch <- prometheus.MustNewConstMetric(vlogDesc, prometheus.GaugeValue, float64(vlog))
	d := g.Disk()
	ch <- prometheus.MustNewConstMetric(freeDesc, prometheus.GaugeValue, float64(d.Free))
	ch <- prometheus.MustNewConstMetric(ballastDesc, prometheus.GaugeValue, float64(d.Ballast))
	ch <- prometheus.MustNewConstMetric(reserveDesc, prometheus.GaugeValue, float64(d.Reserve))
	ch <- prometheus.MustNewConstMetric(lowDesc, prometheus.GaugeValue, one(d.Low))
	ch <- prometheus.MustNewConstMetric(lowsDesc, prometheus.CounterValue, float64(d.Lows))
}

// routeStates sends the circuit and pause of each route of g.Routes: a
// removed route's state has no bearing on anything, as its entries are
// dead-lettered unsent.
func (g gauges) routeStates(ch chan<- prometheus.Metric, states map[forward.Target]forward.RouteState) {
	for _, t := range g.Routes {
		s := states[t]
		current := s.Circuit
		if current == "" {
			current = forward.Closed
		}
		for _, c := range circuits {
			ch <- prometheus.MustNewConstMetric(circuitDesc, prometheus.GaugeValue, one(c == current), t.Source, t.Route, string(c))
		}
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, one(s.Paused), t.Source, t.Route)
	}
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// perRoute sends one series per route in counts or in g.Routes; a route
// removed from the configuration has one while it has entries.
func (g gauges) perRoute(ch chan<- prometheus.Metric, desc *prometheus.Desc, counts map[forward.Target]int) {
	for _, t := range g.Routes {
		if _, ok := counts[t]; !ok {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, 0, t.Source, t.Route)
		}
	}
	for t, n := range counts {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n), t.Source, t.Route)
	}
}
