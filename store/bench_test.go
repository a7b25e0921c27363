package store

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
)

// BenchmarkDecide measures the decision path with many deliveries in
// flight, as under load: unique request IDs, durable (synced) commits,
// group-committed by the writer. Run with -cpu to vary the parallelism.
// disk-B/op is what the process had written to disk per decision (Linux).
// routes is how many routes each delivery is forwarded to (0: the source
// does not forward).
func BenchmarkDecide(b *testing.B) {
	for _, routes := range []int{0, 1, 3} {
		names := []string{"ledger", "audit", "search"}[:routes]
		b.Run(fmt.Sprintf("routes=%d", routes), func(b *testing.B) {
			s := openBench(b)
			body := []byte(`{"pad":"` + strings.Repeat("x", 1000) + `"}`) // 1 KB
			var n atomic.Int64
			b.SetParallelism(32) // in-flight deliveries per CPU, like concurrent HTTP requests
			b.ReportAllocs()
			written := diskWritten()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					d := versioned(fmt.Sprint("req-", i), fmt.Sprint("res-", i%1000), uint64(i))
					d.Forward, d.Routes, d.Body = routes > 0, names, body
					if _, err := s.Decide(ctx, d); err != nil {
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

// openBench opens a store that logs nothing in a temporary directory,
// closed when the benchmark ends.
func openBench(b *testing.B) *Store {
	s := New(b.TempDir())
	s.Logger = zap.NewNop()
	if err := s.Open(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkDecideDuplicate measures redeliveries of one held request ID.
func BenchmarkDecideDuplicate(b *testing.B) {
	s := openBench(b)
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

// diskWritten returns the bytes this process has had written to disk so
// far, or -1 where /proc/self/io does not say.
func diskWritten() int64 {
	io, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range bytes.Split(io, []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte("write_bytes: ")); ok {
			if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}
