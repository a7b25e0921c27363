package sender_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/store"
)

// BenchmarkForward measures draining the outbox: b.N accepted deliveries
// (1 KB bodies, 1000 resources) are written first, untimed, then the
// forwarder delivers them all to a loopback downstream that answers 200 at
// once; the time is from the forwarder's start until every entry is
// settled on disk. Its inverse is forwarded deliveries per second.
func BenchmarkForward(b *testing.B) {
	var received atomic.Int64
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		received.Add(1)
	}))
	defer down.Close()
	s := store.New(b.TempDir())
	if err := s.Open(); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	pad := fmt.Sprintf("%0900d", 0)

	var wg sync.WaitGroup
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				body := fmt.Sprintf(`{"id":"req-%d","object":"res-%d","version":%d,"pad":%q}`, i, i%1000, i, pad)
				d := webhookd.Delivery{
					Source: "bench", RequestID: fmt.Sprint("req-", i), Fingerprint: fmt.Sprint(i), ReceivedAt: time.Now(),
					Resource: fmt.Sprint("res-", i%1000), Version: fmt.Sprint(i), VersionOrder: uint64(i),
					Forward: true, Routes: []string{defaultRoute}, Body: []byte(body), ContentType: "application/json",
				}
				if _, err := s.Decide(ctx, d); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range b.N {
		next <- i + 1
	}
	close(next)
	wg.Wait()

	r := route(down.URL)
	r.Concurrency = 64
	f := sender.New(s, map[forward.Target]sender.Route{target("bench"): r}, zap.NewNop())
	b.ResetTimer()
	if err := f.Open(); err != nil {
		b.Fatal(err)
	}
	// Every entry is settled when none is pending: one dead-lettered (a
	// downstream too slow on a loaded machine) ends the run too, and fails it.
	for pending(b, s)[target("bench")] > 0 {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	if err := f.Close(ctx); err != nil {
		b.Fatal(err)
	}
	if got := received.Load(); got != int64(b.N) {
		dead, _, _ := s.DeadLetters(ctx, forward.Target{}, storage.Page{})
		b.Fatalf("downstream received %d requests, want %d; %d dead letters", got, b.N, len(dead))
	}
}
