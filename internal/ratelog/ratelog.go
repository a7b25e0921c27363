// Package ratelog logs a run of failures of one kind without flooding the
// log: the first failure at once, then at most one line an interval with
// the count of failures held back, and the end of the run at once. A
// database outage fails every claim, batch and probe until it ends; its
// start and end are what an operator needs, with a reminder that it goes
// on.
package ratelog

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultEvery is how often a run of failures is logged after its first.
const DefaultEvery = 10 * time.Second

// Failures logs one kind of failure. Its methods may be called from any
// goroutine.
type Failures struct {
	logger *zap.Logger
	level  zapcore.Level
	every  time.Duration
	now    func() time.Time

	mu       sync.Mutex
	failures int       // in this run; 0: no run
	held     int       // since the last line
	since    time.Time // the run's first failure
	last     time.Time // the run's last line
}

// New returns Failures that logs at level, at most once every every during
// a run.
func New(logger *zap.Logger, level zapcore.Level, every time.Duration) *Failures {
	return &Failures{logger: logger, level: level, every: every, now: time.Now}
}

// Fail logs msg with fields for the run's first failure, and then at most
// once every interval, with the count of failures held back since the
// last line ("suppressed").
func (f *Failures) Fail(msg string, fields ...zap.Field) {
	f.mu.Lock()
	now := f.now()
	f.failures++
	if f.failures > 1 && now.Sub(f.last) < f.every {
		f.held++
		f.mu.Unlock()
		return
	}
	held := f.held
	if f.failures == 1 {
		f.since = now
	}
	f.held, f.last = 0, now
	f.mu.Unlock()
	if held > 0 {
		fields = append(fields, zap.Int("suppressed", held))
	}
	f.logger.Log(f.level, msg, fields...)
}

// OK ends a run of failures: it logs msg at info level with the run's
// count of failures and how long it lasted. Outside a run it logs nothing.
func (f *Failures) OK(msg string, fields ...zap.Field) {
	f.mu.Lock()
	failures, since := f.failures, f.since
	f.failures, f.held = 0, 0
	now := f.now()
	f.mu.Unlock()
	if failures == 0 {
		return
	}
	f.logger.Info(msg, append(fields, zap.Int("failures", failures), zap.Duration("after", now.Sub(since)))...)
}
