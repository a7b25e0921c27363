package ratelog

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestFailures(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	f := New(zap.New(core), zapcore.ErrorLevel, 10*time.Second)
	clock := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f.now = func() time.Time { return clock }

	f.OK("back") // no run: nothing
	// 50 failures in 5 s: the first is logged, 49 are held back.
	for range 50 {
		f.Fail("claim", zap.String("source", "billing"))
		clock = clock.Add(100 * time.Millisecond)
	}
	// 10 s after the first line: the second, counting them.
	clock = clock.Add(5 * time.Second)
	f.Fail("claim")
	f.OK("claims again")
	f.OK("claims again") // the run is over: nothing
	f.Fail("claim")      // a new run: logged at once

	type line struct {
		level      zapcore.Level
		msg        string
		suppressed int64
		failures   int64
	}
	var got []line
	for _, e := range logs.All() {
		m := e.ContextMap()
		l := line{level: e.Level, msg: e.Message}
		if n, ok := m["suppressed"].(int64); ok {
			l.suppressed = n
		}
		if n, ok := m["failures"].(int64); ok {
			l.failures = n
		}
		got = append(got, l)
	}
	want := []line{
		{zapcore.ErrorLevel, "claim", 0, 0},
		{zapcore.ErrorLevel, "claim", 49, 0},
		{zapcore.InfoLevel, "claims again", 0, 51},
		{zapcore.ErrorLevel, "claim", 0, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("logged %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
