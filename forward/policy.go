package forward

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/webhookd/webhookd"
)

// RetryPolicy says how often and how far apart a delivery is tried.
type RetryPolicy struct {
	MaxAttempts int
	Initial     time.Duration
	Max         time.Duration
}

// Delay returns the wait before the attempt after attempt number n (from 1):
// exponential with full jitter, between Initial and min(Max, Initial*2^(n-1)),
// so that a downstream coming back is not hit by every retry at once. A
// Retry-After from the downstream (retryAfter > 0) wins, capped at Max.
// jitter is a number in [0, 1).
func (p RetryPolicy) Delay(n int, retryAfter time.Duration, jitter float64) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, p.Max)
	}
	ceiling := float64(p.Initial) * math.Pow(2, float64(n-1))
	ceiling = min(ceiling, float64(p.Max))
	return p.Initial + time.Duration(jitter*(ceiling-float64(p.Initial)))
}

// Verdict is what one attempt's answer means for the entry.
type Verdict int

const (
	Delivered Verdict = iota
	Retry
	Dead
)

// Judge classifies one attempt: 2xx delivered; 408, 425, 429, 5xx and
// transport errors (status 0) worth another try; anything else (other 4xx,
// an unfollowed redirect) will not get better by retrying.
func Judge(status int) Verdict {
	switch {
	case status >= 200 && status < 300:
		return Delivered
	case status == 0, status == http.StatusRequestTimeout, status == http.StatusTooEarly,
		status == http.StatusTooManyRequests, status >= 500:
		return Retry
	}
	return Dead
}

// RetryAfter parses a Retry-After header (seconds or an HTTP date).
func RetryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if secs, err := strconv.ParseUint(h, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if secs > uint64(math.MaxInt64/time.Second) {
			return math.MaxInt64 // more than a Duration holds; Delay caps it
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Result is what became of one forward attempt (or of a superseded entry),
// for the store to record on the outbox entry and the receipt.
type Result struct {
	State         webhookd.ForwardState // delivered, retrying, dead or superseded
	Attempts      int
	Status        int
	Error         string
	At            time.Time
	NextAttemptAt time.Time // when State is retrying
}
