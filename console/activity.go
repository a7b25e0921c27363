package console

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/forward"
)

// The console keeps what happened recently in memory, bounded: per source
// a ring of per-minute counters, and one ring of the latest answers for the
// live tail. It is told on the intake path, so telling it takes one short
// lock and never waits for a reader.
const (
	historyMinutes = 15
	tailSize       = 512 // answers kept for the tail and for streams that reconnect
	subscriberBuf  = 256 // answers queued for one stream before it is dropped
	maxSubscribers = 16  // open live tails
)

// Decision names as the tail shows them; refusals before a decision are
// "rejected".
const rejected = "rejected"

var decisions = []string{string(webhookd.Accepted), string(webhookd.Duplicate), string(webhookd.Stale), string(webhookd.Conflict), rejected}

// reasons are the gateway's rejection reasons (the rejections metric's
// label), in the order the overview lists them; any other is counted as the
// last.
var reasons = [...]string{"signature", "invalid", "too_large", "encoding", "timeout", "unknown_source", "unavailable", "internal", "other"}

// forwardResults are sender.Metrics' results.
var forwardResults = [...]string{"delivered", "retry", "dead"}

// Event is one answer of the public listener, as the live tail shows it.
type Event struct {
	Seq        uint64    `json:"seq"`
	At         time.Time `json:"at"`
	Source     string    `json:"source"`
	Decision   string    `json:"decision"`
	RequestID  string    `json:"request_id,omitempty"`
	DeliveryID string    `json:"delivery_id,omitempty"`
	Resource   string    `json:"resource,omitempty"`
	Version    string    `json:"version,omitempty"`
	Latest     string    `json:"latest_version,omitempty"`
	Reason     string    `json:"reason,omitempty"`  // why it was rejected
	Message    string    `json:"message,omitempty"` // the refusal as the sender read it
	// Receipt says the answer was a decision, which has a receipt to link
	// to. A refused request has none, whatever request ID it carried.
	Receipt bool `json:"receipt,omitempty"`
}

// filter selects events for a tail; empty fields select everything.
type filter struct{ source, decision string }

func (f filter) match(e *Event) bool {
	return (f.source == "" || f.source == e.Source) && (f.decision == "" || f.decision == e.Decision)
}

// minute is one minute of one source's counts.
type minute struct {
	at        int64 // Unix minute these counts are for
	decisions [4]int64
	rejected  [len(reasons)]int64
	forwards  [len(forwardResults)]int64
	took      time.Duration // summed over forward attempts
	slowest   time.Duration
}

// series is a source's last historyMinutes minutes, indexed by Unix minute.
type series [historyMinutes]minute

func (s *series) at(now time.Time) *minute {
	m := now.Unix() / 60
	b := &s[m%historyMinutes]
	if b.at != m {
		*b = minute{at: m}
	}
	return b
}

// subscriber is one open live tail.
type subscriber struct {
	filter filter
	events chan Event
	// lagged is set when an event found the queue full: the stream ends, and
	// the browser reconnects and reads what it missed from the ring.
	lagged atomic.Bool
}

// activity is what the console remembers of recent traffic.
type activity struct {
	now func() time.Time

	mu      sync.Mutex
	series  map[string]*series // configured sources and configs.UnknownSource
	tail    [tailSize]Event
	seq     uint64 // of the latest event
	streams map[*subscriber]struct{}
}

func newActivity(sources []string, now func() time.Time) *activity {
	a := &activity{now: now, series: make(map[string]*series), streams: make(map[*subscriber]struct{})}
	for _, s := range append(slices.Clone(sources), configs.UnknownSource) {
		a.series[s] = new(series)
	}
	return a
}

// seriesOf returns the series of source; the gateway bounds the names it
// reports, and anything else is counted as unknown.
func (a *activity) seriesOf(source string) *series {
	if s, ok := a.series[source]; ok {
		return s
	}
	return a.series[configs.UnknownSource]
}

// Decided is the gateway's Observer method for a decided delivery.
func (a *activity) Decided(d webhookd.Delivery, out webhookd.Outcome) {
	e := Event{Source: d.Source, Decision: string(out.Decision), RequestID: d.RequestID, DeliveryID: d.DeliveryID,
		Resource: d.Resource, Version: d.Version, Latest: out.LatestVersion, Receipt: true}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if i := slices.Index(decisions[:4], e.Decision); i >= 0 {
		a.seriesOf(e.Source).at(now).decisions[i]++
	}
	a.publish(&e, now)
}

// Rejected is the gateway's Observer method for a refused request.
func (a *activity) Rejected(source string, d webhookd.Delivery, reason, message string) {
	e := Event{Source: source, Decision: rejected, RequestID: d.RequestID, DeliveryID: d.DeliveryID,
		Resource: d.Resource, Version: d.Version, Reason: reason, Message: message}
	i := slices.Index(reasons[:], reason)
	if i < 0 {
		i = len(reasons) - 1
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seriesOf(source).at(now).rejected[i]++
	a.publish(&e, now)
}

// Attempted is sender.Metrics' method: one forward attempt to target and
// its result. The overview counts attempts per source.
func (a *activity) Attempted(target forward.Target, result string, took time.Duration) {
	i := slices.Index(forwardResults[:], result)
	if i < 0 {
		return
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.seriesOf(target.Source).at(now)
	m.forwards[i]++
	m.took += took
	m.slowest = max(m.slowest, took)
}

// publish numbers e, keeps it in the ring and offers it to every stream
// whose filter it matches, without waiting for any. a.mu is held.
func (a *activity) publish(e *Event, now time.Time) {
	a.seq++
	e.Seq, e.At = a.seq, now
	a.tail[a.seq%tailSize] = *e
	for s := range a.streams {
		if !s.filter.match(e) || s.lagged.Load() {
			continue
		}
		select {
		case s.events <- *e:
		default:
			s.lagged.Store(true)
		}
	}
}

// recent returns up to limit of the latest events that f matches, oldest
// first, and the number of the latest event of all.
func (a *activity) recent(f filter, limit int) ([]Event, uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.recentLocked(f, 0, limit), a.seq
}

// recentLocked returns up to limit of the latest events after seq that f
// matches, oldest first. An after beyond the latest event is from before a
// restart: everything held is new then. a.mu is held.
func (a *activity) recentLocked(f filter, after uint64, limit int) []Event {
	if after > a.seq {
		after = 0
	}
	var out []Event
	for seq := a.seq; seq > after && seq+tailSize > a.seq && len(out) < limit; seq-- {
		if e := &a.tail[seq%tailSize]; f.match(e) {
			out = append(out, *e)
		}
	}
	slices.Reverse(out)
	return out
}

// subscribe opens a stream of the events f matches, starting with those
// held after seq. It returns nil when maxSubscribers are open.
func (a *activity) subscribe(f filter, after uint64) (*subscriber, []Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.streams) >= maxSubscribers {
		return nil, nil
	}
	s := &subscriber{filter: f, events: make(chan Event, subscriberBuf)}
	a.streams[s] = struct{}{}
	return s, a.recentLocked(f, after, tailSize)
}

func (a *activity) unsubscribe(s *subscriber) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.streams, s)
}

// Counts are one source's last historyMinutes minutes, oldest first.
type Counts struct {
	Decisions [4][historyMinutes]int64 // accepted, duplicate, stale, conflict
	Rejected  [historyMinutes]int64
	Reasons   [len(reasons)]int64 // over the whole window
	Forwards  [len(forwardResults)][historyMinutes]int64
	// Latency is the mean forward attempt of each minute; Slowest the
	// slowest attempt of the window.
	Latency [historyMinutes]time.Duration
	Slowest time.Duration
	took    time.Duration
	tries   int64
}

// counts returns each source's recent counts.
func (a *activity) counts() map[string]*Counts {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now().Unix() / 60
	out := make(map[string]*Counts, len(a.series))
	for source, s := range a.series {
		c := new(Counts)
		for i := range historyMinutes {
			at := now - historyMinutes + 1 + int64(i)
			b := &s[at%historyMinutes]
			if b.at != at {
				continue
			}
			for d, n := range b.decisions {
				c.Decisions[d][i] = n
			}
			for r, n := range b.rejected {
				c.Rejected[i] += n
				c.Reasons[r] += n
			}
			var tries int64
			for f, n := range b.forwards {
				c.Forwards[f][i] = n
				tries += n
			}
			if tries > 0 {
				c.Latency[i] = b.took / time.Duration(tries)
			}
			c.took += b.took
			c.tries += tries
			c.Slowest = max(c.Slowest, b.slowest)
		}
		out[source] = c
	}
	return out
}

// Mean is the mean forward attempt of the window.
func (c *Counts) Mean() time.Duration {
	if c.tries == 0 {
		return 0
	}
	return c.took / time.Duration(c.tries)
}

// Total sums a per-minute row.
func total[T int64 | time.Duration](row [historyMinutes]T) T {
	var n T
	for _, v := range row {
		n += v
	}
	return n
}
