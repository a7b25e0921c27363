package signature_test

import (
	"testing"

	"github.com/webhookd/webhookd/signature"
)

func TestMaxBodyFor(t *testing.T) {
	for _, tc := range []struct {
		scheme string
		want   int
	}{
		{signature.GitHub, 25 << 20},
		{signature.Stripe, 10 << 20},
		{signature.Shopify, 10 << 20},
		{signature.Slack, 10 << 20},
		{signature.StandardWebhooks, 10 << 20},
		{signature.HMACSHA256, 0},
		{signature.None, 0},
		{"unknown", 0},
	} {
		if got := signature.MaxBodyFor(tc.scheme); got != tc.want {
			t.Errorf("MaxBodyFor(%q) = %d, want %d", tc.scheme, got, tc.want)
		}
	}
}
