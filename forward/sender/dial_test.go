package sender

import (
	"testing"
	"time"
)

// fasthttp dials with no time given (0) for a request that waited for a
// free connection: the dial then gets the route's timeout, not none, and
// not an expired one, which failed every dial through a proxy.
func TestDialTimeout(t *testing.T) {
	for _, tc := range []struct{ left, want time.Duration }{
		{0, 10 * time.Second},
		{-time.Second, 10 * time.Second},
		{3 * time.Second, 3 * time.Second},
	} {
		if got := dialTimeout(tc.left, 10*time.Second); got != tc.want {
			t.Errorf("dialTimeout(%v, 10s) = %v, want %v", tc.left, got, tc.want)
		}
	}
}
