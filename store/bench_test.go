package store

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
)

// BenchmarkDecide measures the decision path with many deliveries in
// flight, as under load: unique request IDs, durable (synced) commits,
// group-committed by the writer. Run with -cpu to vary the parallelism.
func BenchmarkDecide(b *testing.B) {
	for _, forward := range []bool{false, true} {
		b.Run(fmt.Sprintf("forward=%v", forward), func(b *testing.B) {
			s := New(b.TempDir())
			s.Logger = zap.NewNop()
			if err := s.Open(); err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			body := []byte(`{"pad":"` + strings.Repeat("x", 1000) + `"}`) // 1 KB
			var n atomic.Int64
			b.SetParallelism(32) // in-flight deliveries per CPU, like concurrent HTTP requests
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					d := versioned(fmt.Sprint("req-", i), fmt.Sprint("res-", i%1000), uint64(i))
					d.Forward, d.Body = forward, body
					if _, err := s.Decide(ctx, d); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkDecideDuplicate measures redeliveries of one held request ID.
func BenchmarkDecideDuplicate(b *testing.B) {
	s := New(b.TempDir())
	s.Logger = zap.NewNop()
	if err := s.Open(); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var n atomic.Int64
	for i := 0; i < 1000; i++ {
		if _, err := s.Decide(ctx, delivery(fmt.Sprint("req-", i), "d", `{}`)); err != nil {
			b.Fatal(err)
		}
	}
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if _, err := s.Decide(ctx, delivery(fmt.Sprint("req-", i%1000), "d", `{}`)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
