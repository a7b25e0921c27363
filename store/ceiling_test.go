package store

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

// The benchmarks here are the ceilings of BenchmarkDecide and
// BenchmarkSettle: Badger opened with the store's options, writing the
// keys and values those write, group-committed the way the store's writer
// commits (one goroutine, batches of what waits, up to DefaultMaxBatch),
// under the same parallelism, with nothing decided, encoded or read. What
// the store's benchmark costs over its ceiling is webhookd's own.

// rawWriter group-commits batches of prepared writes, as Store.write does
// with staged operations.
type rawWriter struct {
	db  *badger.DB
	ops chan *rawOp
}

type rawOp struct {
	sets []*badger.Entry
	dels [][]byte
	done chan error
}

func openRawWriter(b *testing.B) *rawWriter {
	s := New(b.TempDir())
	s.Logger = zap.NewNop()
	db, err := badger.Open(s.badgerOptions())
	if err != nil {
		b.Fatal(err)
	}
	w := &rawWriter{db: db, ops: make(chan *rawOp, DefaultMaxBatch)}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		// The store turns readahead off for Badger's logs (adviseLogs), so
		// that a sync writes the pages a commit changed; the ceiling does
		// too, or it would write whole folios the store does not.
		advisor := newLogAdvisor(s.Path)
		batch := make([]*rawOp, 0, DefaultMaxBatch)
		for o := range w.ops {
			batch = append(batch[:0], o)
		drain:
			for len(batch) < DefaultMaxBatch {
				select {
				case o, ok := <-w.ops:
					if !ok {
						break drain
					}
					batch = append(batch, o)
				default:
					break drain
				}
			}
			w.commit(batch)
			if err := advisor.advise(); err != nil {
				b.Error(err)
			}
		}
	}()
	b.Cleanup(func() {
		close(w.ops)
		<-stopped
		db.Close()
	})
	return w
}

func (w *rawWriter) commit(batch []*rawOp) {
	txn := w.db.NewTransaction(true)
	defer txn.Discard()
	var err error
	for _, o := range batch {
		for _, e := range o.sets {
			if err == nil {
				err = txn.SetEntry(e)
			}
		}
		for _, k := range o.dels {
			if err == nil {
				err = txn.Delete(k)
			}
		}
	}
	if err == nil {
		err = txn.Commit()
	}
	for _, o := range batch {
		o.done <- err
	}
}

func (w *rawWriter) write(o *rawOp) error {
	o.done = make(chan error, 1)
	w.ops <- o
	return <-o.done
}

// decisionValues returns the values one decision of BenchmarkDecide's
// shape writes: its receipt, latest version, payload and first outbox
// entry (the last two nil without routes), as a store wrote them.
func decisionValues(b *testing.B, routes []string, body []byte) (receipt, latest, payload, entry []byte) {
	s := openBench(b)
	d := versioned("req-1", "res-1", 1)
	d.Forward, d.Routes, d.Body = len(routes) > 0, routes, body
	if _, err := s.Decide(ctx, d); err != nil {
		b.Fatal(err)
	}
	err := s.db.View(func(txn *badger.Txn) error {
		t := s.reader(txn)
		var err error
		if receipt, err = t.getRaw(receiptKey(d.Source, d.RequestID)); err != nil {
			return err
		}
		if latest, err = t.getRaw(latestKey(d.Source, d.Resource)); err != nil {
			return err
		}
		if payload, err = t.getRaw(payloadKey(d.Source, d.RequestID)); err != nil {
			return err
		}
		entry, err = t.getRaw(outboxKey(1))
		return err
	})
	if err != nil || receipt == nil || latest == nil || len(routes) > 0 && (payload == nil || entry == nil) {
		b.Fatalf("values of a decision: %v", err)
	}
	return receipt, latest, payload, entry
}

// BenchmarkBadgerAlone is BenchmarkDecide's ceiling: per operation the
// keys and values of one decision of a new request ID (receipt, its two
// index keys, latest version, and with routes the payload and an outbox
// entry per route), the receipt's with its TTL.
func BenchmarkBadgerAlone(b *testing.B) {
	for _, routes := range []int{0, 1, 3} {
		names := []string{"ledger", "audit", "search"}[:routes]
		b.Run(fmt.Sprintf("routes=%d", routes), func(b *testing.B) {
			body := []byte(`{"pad":"` + strings.Repeat("x", 1000) + `"}`) // 1 KB
			receipt, latest, payload, entry := decisionValues(b, names, body)
			w := openRawWriter(b)
			var n, seq atomic.Uint64
			expiresAt := expiry(time.Now(), DefaultReceiptTTL)
			b.SetParallelism(32)
			b.ReportAllocs()
			written := diskWritten()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					requestID, resource := fmt.Sprint("req-", i), fmt.Sprint("res-", i%1000)
					pos := receiptPos{firstSeen: time.Now(), source: "billing", requestID: requestID}
					sets := []*badger.Entry{
						badger.NewEntry(receiptKey("billing", requestID), receipt),
						badger.NewEntry(byTimeKey(pos), nil),
						badger.NewEntry(bySourceKey(pos), nil),
						badger.NewEntry(latestKey("billing", resource), latest),
					}
					if routes > 0 {
						sets = append(sets, badger.NewEntry(payloadKey("billing", requestID), payload))
						for range routes {
							sets = append(sets, badger.NewEntry(outboxKey(seq.Add(1)), entry))
						}
					}
					for _, e := range sets[:3] {
						e.ExpiresAt = expiresAt
					}
					if routes > 0 {
						sets[4].ExpiresAt = expiresAt
					}
					if err := w.write(&rawOp{sets: sets}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			if written >= 0 {
				b.ReportMetric(float64(diskWritten()-written)/float64(b.N), "disk-B/op")
			}
		})
	}
}

// BenchmarkSettle measures forwarding's store side without HTTP: with
// b.N entries waiting (1 KB bodies, 1000 resources, written untimed),
// many owners claim one entry each and settle it delivered. Its ceiling
// is BenchmarkSettleBadgerAlone.
func BenchmarkSettle(b *testing.B) {
	s := openBench(b)
	fill(b, s, b.N)
	target := forward.Target{Source: "billing", Route: "ledger"}
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var claims []forward.Claim
			for len(claims) == 0 {
				var err error
				if claims, err = s.Claim(ctx, "bench", target, 1, time.Minute); err != nil {
					b.Error(err)
					return
				}
			}
			if err := s.Settle(ctx, claims[0], forward.Result{State: webhookd.ForwardDelivered, Status: 200}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if n := s.queue.pending()[target]; n != 0 {
		b.Errorf("%d entries left", n)
	}
}

// BenchmarkSettleBadgerAlone is BenchmarkSettle's ceiling: per operation
// the outbox key's delete and the forward status key, with its TTL, that
// settling a delivered entry writes.
func BenchmarkSettleBadgerAlone(b *testing.B) {
	w := openRawWriter(b)
	delivered := time.Now()
	status, err := encode(&webhookd.ForwardStatus{State: webhookd.ForwardDelivered, Attempts: 1, LastStatus: 200, DeliveredAt: &delivered})
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Uint64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			k := forwardKey("billing", fmt.Sprint("req-", i), delivered, "ledger")
			o := &rawOp{sets: []*badger.Entry{badger.NewEntry(k, status).WithTTL(DefaultReceiptTTL)}, dels: [][]byte{outboxKey(i)}}
			if err := w.write(o); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// fill decides n deliveries of new request IDs forwarded to one route,
// with 1 KB bodies over 1000 resources, in parallel.
func fill(tb testing.TB, s *Store, n int) {
	body := []byte(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)
	var next atomic.Int64
	done := make(chan struct{})
	for range 64 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				d := versioned(fmt.Sprint("req-", i), fmt.Sprint("res-", i%1000), uint64(i))
				d.Body = body
				if _, err := s.Decide(ctx, d); err != nil {
					tb.Error(err)
					return
				}
			}
		}()
	}
	for range 64 {
		<-done
	}
}
