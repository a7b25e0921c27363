package forward

import (
	"context"
	"testing"
	"time"
)

// fasthttp dials with no time given (0) for a request that waited for a
// free connection: the dial then gets the route's timeout, not none, and
// not an expired one, which failed every dial through a proxy.
func TestDialTimeout(t *testing.T) {
	f := &Forwarder{ctx: context.Background()}
	for _, tc := range []struct{ given, want time.Duration }{
		{0, 10 * time.Second},
		{-time.Second, 10 * time.Second},
		{3 * time.Second, 3 * time.Second},
	} {
		ctx, cancel := f.dialContext(tc.given, 10*time.Second)
		deadline, ok := ctx.Deadline()
		cancel()
		if left := time.Until(deadline); !ok || left > tc.want || left < tc.want-time.Second {
			t.Errorf("dial given %v: %v left, want about %v", tc.given, left, tc.want)
		}
	}
}
