package signature_test

import (
	"slices"
	"testing"
	"time"

	"github.com/webhookd/webhookd/signature"
)

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  signature.Config
		want string
	}{
		{"unknown scheme", signature.Config{Scheme: "foo"}, `scheme: unknown scheme "foo"`},
		{"scheme is case-sensitive", signature.Config{Scheme: "GitHub", Secrets: []string{"s"}}, `scheme: unknown scheme "GitHub"`},
		{"no secrets", signature.Config{Scheme: signature.Stripe}, `secrets: at least one non-empty secret is required for scheme "stripe"`},
		{"only empty secrets", signature.Config{Scheme: signature.GitHub, Secrets: []string{"", ""}}, `secrets: at least one non-empty secret is required for scheme "github"`},
		{"standard secret without prefix", signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}, `secrets[0]: standard-webhooks secrets must be "whsec_" followed by base64`},
		{"standard secret not base64", signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{"", specSecret, "whsec_not base64!"}}, `secrets[2]: standard-webhooks secrets must be "whsec_" followed by base64`},
		{"standard secret empty key", signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{"whsec_"}}, `secrets[0]: standard-webhooks secrets must be "whsec_" followed by base64`},
		{"generic without header", signature.Config{Scheme: signature.HMACSHA256, Secrets: []string{"s"}}, `header: required for scheme "hmac-sha256"`},
		{"generic with bad header", signature.Config{Scheme: signature.HMACSHA256, Secrets: []string{"s"}, Header: "X Sig"}, `header: "X Sig" is not a valid header name`},
		{"generic with bad encoding", signature.Config{Scheme: signature.HMACSHA256, Secrets: []string{"s"}, Header: "X-Sig", Encoding: "base32"}, `encoding: must be hex or base64`},
		{"header on another scheme", signature.Config{Scheme: signature.GitHub, Secrets: []string{"s"}, Header: "X-Sig"}, `header: only applies to scheme "hmac-sha256", not "github"`},
		{"prefix on another scheme", signature.Config{Scheme: signature.Shopify, Secrets: []string{"s"}, Prefix: "sha256="}, `prefix: only applies to scheme "hmac-sha256", not "shopify"`},
		{"encoding on another scheme", signature.Config{Scheme: signature.Slack, Secrets: []string{"s"}, Encoding: "hex"}, `encoding: only applies to scheme "hmac-sha256", not "slack"`},
		{"negative tolerance", signature.Config{Scheme: signature.Stripe, Secrets: []string{"s"}, Tolerance: -time.Second}, `tolerance: must not be negative`},
		{"secrets with none", signature.Config{Secrets: []string{"s"}}, `secrets: scheme "none" checks nothing, so secrets must be empty (set a scheme to use them)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := signature.New(tc.cfg)
			if err == nil {
				t.Fatalf("New(%+v) succeeded, want error %q", tc.cfg, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("New error = %q, want %q", err, tc.want)
			}
			if v != nil {
				t.Errorf("New returned a verifier alongside an error")
			}
		})
	}
}

func TestNewAcceptsEveryScheme(t *testing.T) {
	secret := map[string]string{signature.StandardWebhooks: specSecret}
	for _, scheme := range signature.Schemes() {
		cfg := signature.Config{Scheme: scheme}
		if scheme != signature.None {
			cfg.Secrets = []string{"", "s"}
			if s, ok := secret[scheme]; ok {
				cfg.Secrets = []string{s}
			}
		}
		if scheme == signature.HMACSHA256 {
			cfg.Header = "X-Sig"
		}
		if v, err := signature.New(cfg); err != nil || v == nil {
			t.Errorf("New(%+v) = %v, %v", cfg, v, err)
		}
	}
	// Standard Webhooks secrets with the padding left off are still valid.
	if _, err := signature.New(signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{"whsec_YWJjZA"}}); err != nil {
		t.Errorf("unpadded secret refused: %v", err)
	}
	// Tolerance is meaningless, not wrong, for schemes without a timestamp.
	if _, err := signature.New(signature.Config{Scheme: signature.GitHub, Secrets: []string{"s"}, Tolerance: time.Minute}); err != nil {
		t.Errorf("tolerance on github refused: %v", err)
	}
}

func TestSchemes(t *testing.T) {
	want := []string{"none", "hmac-sha256", "standard-webhooks", "stripe", "github", "shopify", "slack"}
	got := signature.Schemes()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Schemes() = %v, want %v", got, want)
	}
	// Callers may keep or modify the slice without affecting the package.
	signature.Schemes()[0] = "mutated"
	if signature.Schemes()[0] == "mutated" {
		t.Error("Schemes() shares its backing array")
	}
}

func TestPresetFor(t *testing.T) {
	for _, tc := range []struct {
		scheme string
		want   signature.Preset
	}{
		{signature.GitHub, signature.Preset{RequestID: "header:X-GitHub-Delivery"}},
		{signature.Stripe, signature.Preset{RequestID: "json:id"}},
		{signature.StandardWebhooks, signature.Preset{RequestID: "header:webhook-id|header:svix-id"}},
		{signature.Shopify, signature.Preset{
			RequestID:  "header:X-Shopify-Event-Id|header:Shopify-Event-Id|header:Shopify-Webhook-Id",
			DeliveryID: "header:X-Shopify-Webhook-Id|header:Shopify-Webhook-Id",
		}},
		{signature.Slack, signature.Preset{RequestID: "json:event_id"}},
		{signature.HMACSHA256, signature.Preset{}},
		{signature.None, signature.Preset{}},
		{"", signature.Preset{}},
		{"unknown", signature.Preset{}},
	} {
		if got := signature.PresetFor(tc.scheme); got != tc.want {
			t.Errorf("PresetFor(%q) = %+v, want %+v", tc.scheme, got, tc.want)
		}
	}
}
