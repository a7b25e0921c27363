package forward

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	tests := []struct {
		status int
		want   Verdict
	}{
		{200, Delivered}, {202, Delivered}, {204, Delivered},
		{0, Retry}, {408, Retry}, {425, Retry}, {429, Retry}, {500, Retry}, {502, Retry}, {503, Retry},
		{301, Dead}, {400, Dead}, {401, Dead}, {404, Dead}, {409, Dead}, {422, Dead},
	}
	for _, tt := range tests {
		if got := Judge(tt.status); got != tt.want {
			t.Errorf("Judge(%d) = %d, want %d", tt.status, got, tt.want)
		}
	}
}

func TestDelay(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, Initial: time.Second, Max: 10 * time.Second}
	tests := []struct {
		n          int
		retryAfter time.Duration
		jitter     float64
		want       time.Duration
	}{
		{1, 0, 0.99, time.Second},            // the first ceiling is Initial itself
		{2, 0, 0, time.Second},               // full jitter reaches down to Initial
		{2, 0, 0.5, 1500 * time.Millisecond}, // halfway to 2s
		{3, 0, 0.5, 2500 * time.Millisecond}, // halfway to 4s
		{10, 0, 0.5, 5500 * time.Millisecond},
		{60, 0, 0.999999, 10 * time.Second}, // capped at Max, no overflow
		{2, 7 * time.Second, 0.5, 7 * time.Second},
		{2, time.Hour, 0.5, 10 * time.Second}, // Retry-After capped at Max
	}
	for _, tt := range tests {
		got := p.Delay(tt.n, tt.retryAfter, tt.jitter)
		if got.Round(time.Millisecond) != tt.want {
			t.Errorf("Delay(%d, %v, %v) = %v, want %v", tt.n, tt.retryAfter, tt.jitter, got, tt.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := map[string]time.Duration{
		"":     0,
		"5":    5 * time.Second,
		"0":    0,
		"-3":   0,
		"+3":   0,
		"soon": 0,
		// Past what a Duration holds; multiplied out, they wrapped to 290 ms
		// and to a negative delay.
		"18446744074":          math.MaxInt64,
		"9223372037":           math.MaxInt64,
		"99999999999999999999": math.MaxInt64,
		"9223372036":           9223372036 * time.Second,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
	}
	for h, want := range tests {
		if got := RetryAfter(h, now); got != want {
			t.Errorf("RetryAfter(%q) = %v, want %v", h, got, want)
		}
	}
}
