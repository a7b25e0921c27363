package console

import (
	"testing"
	"time"

	"github.com/webhookd/webhookd"
)

// BenchmarkDecided is what the console adds to each delivery on the intake
// path, with no live tail open and with every one open and reading.
func BenchmarkDecided(b *testing.B) {
	b.Run("tails=0", func(b *testing.B) { benchmarkDecided(b, 0) })
	b.Run("tails=16", func(b *testing.B) { benchmarkDecided(b, maxSubscribers) })
}

func benchmarkDecided(b *testing.B, tails int) {
	a := newActivity([]string{"billing"}, time.Now)
	done := make(chan struct{})
	defer close(done)
	for range tails {
		s, _ := a.subscribe(filter{}, 0)
		go func() {
			for {
				select {
				case <-s.events:
				case <-done:
					return
				}
			}
		}()
	}
	d := webhookd.Delivery{Source: "billing", RequestID: "req-1", DeliveryID: "dlv-1", Resource: "sub_1", Version: "7"}
	out := webhookd.Outcome{Decision: webhookd.Accepted, LatestVersion: "7"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a.Decided(d, out)
		}
	})
}
