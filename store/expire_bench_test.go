package store

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookd/webhookd/store/storetest"
)

// BenchmarkExpire measures Expire per expired receipt: b.N receipts of a
// forwarding source, flushed into Badger's tables by a reopen, then
// expired in one pass. Run it with a count: -benchtime=100000x.
func BenchmarkExpire(b *testing.B) {
	dir := b.TempDir()
	clock := storetest.NewClock()
	open := func() *Store {
		s := New(dir)
		s.Logger, s.Now = zap.NewNop(), clock.Now
		if err := s.Open(); err != nil {
			b.Fatal(err)
		}
		return s
	}
	s := open()
	var wg sync.WaitGroup
	const workers = 64
	for w := range workers {
		wg.Go(func() {
			for i := w; i < b.N; i += workers {
				d := delivery(fmt.Sprint("req-", i), "d", `{"n":1}`)
				d.ReceivedAt = clock.Now()
				if _, err := s.Decide(ctx, d); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	s = open()
	b.Cleanup(func() { s.Close() })
	clock.Advance(s.ReceiptTTL + time.Second)
	b.ResetTimer()
	if err := s.Expire(); err != nil {
		b.Fatal(err)
	}
}
