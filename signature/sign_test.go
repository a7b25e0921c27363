package signature_test

import (
	"encoding/base64"
	"errors"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/webhookd/webhookd/signature"
)

func TestSignStandardVerifies(t *testing.T) {
	secret := whsec("forwarding key for downstream")
	body := []byte(`{"type":"invoice.paid"}`)
	at := now.Add(500 * time.Millisecond) // the header carries whole seconds
	hs, err := signature.SignStandard(secret, "msg_forward_1", at, body)
	if err != nil {
		t.Fatal(err)
	}
	if hs["webhook-timestamp"] != unix(now) {
		t.Errorf("webhook-timestamp = %q, want %q", hs["webhook-timestamp"], unix(now))
	}
	wantSig := "v1," + base64.StdEncoding.EncodeToString(mac(standardKey(secret), "msg_forward_1."+unix(now)+"."+string(body)))
	if hs["webhook-id"] != "msg_forward_1" || hs["webhook-signature"] != wantSig {
		t.Errorf("SignStandard = %v, want id msg_forward_1 and signature %s", hs, wantSig)
	}
	h := http.Header{}
	for k, v := range hs {
		h.Set(k, v)
	}
	v, err := signature.New(signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(h, body, at); err != nil {
		t.Fatalf("SignStandard output rejected: %v", err)
	}
	if err := v.Verify(h, append(body, ' '), at); !errors.Is(err, signature.ErrMismatch) {
		t.Errorf("SignStandard output verified another body: %v", err)
	}
}

func TestSignStandardRejectsBadInput(t *testing.T) {
	for _, tc := range []struct{ secret, id string }{
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_1"},
		{"whsec_***", "msg_1"},
		{specSecret, ""},
	} {
		if hs, err := signature.SignStandard(tc.secret, tc.id, now, nil); err == nil {
			t.Errorf("SignStandard(%q, %q) = %v, want error", tc.secret, tc.id, hs)
		}
	}
}

func TestResignEveryScheme(t *testing.T) {
	body := []byte(`{"id":"evt_replayed"}`)
	recordedAt := now.Add(-72 * time.Hour)
	for _, c := range schemeCases {
		t.Run(c.name, func(t *testing.T) {
			h := c.sign(c.oldSecret, body, recordedAt)
			h.Set("Content-Type", "application/json")
			h.Set("X-Keep", "1")
			if c.name == "github" {
				h.Set("X-Hub-Signature", "sha1=0000000000000000000000000000000000000000")
			}
			recordedID := h.Get("webhook-id") + h.Get("svix-id")

			cfg := c.cfg
			cfg.Secrets = []string{"", c.newSecret, c.oldSecret}
			if err := signature.Resign(cfg, h, body, now); err != nil {
				t.Fatalf("Resign: %v", err)
			}

			// Signed with the first non-empty secret, at now.
			wantErr(t, c.verifier(t, c.newSecret).Verify(h, body, now), nil)
			if c.timestamps {
				wantErr(t, c.verifier(t, c.newSecret).Verify(h, body, now.Add(-72*time.Hour)), signature.ErrTimestamp)
			}
			// And byte for byte what the provider's own scheme gives, under
			// the names the recording used and no others.
			fresh := c.sign(c.newSecret, body, now)
			fresh.Set("X-Keep", "1")
			fresh.Set("Content-Type", "application/json")
			for _, id := range []string{"webhook-id", "svix-id"} {
				if fresh.Get(id) != "" {
					fresh.Set(id, recordedID)
				}
			}
			if len(h) != len(fresh) {
				t.Errorf("headers = %v, want %v", h, fresh)
			}
			for name := range fresh {
				if got, want := h.Get(name), fresh.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			if _, ok := h["X-Hub-Signature"]; ok {
				t.Errorf("stale SHA-1 signature kept: %v", h)
			}
		})
	}
}

func TestResignNoneChangesNothing(t *testing.T) {
	h := signGitHub("s", []byte("x"), now)
	before := h.Clone()
	if err := signature.Resign(signature.Config{}, h, []byte("x"), now); err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(h, before, func(a, b []string) bool { return len(a) == len(b) && a[0] == b[0] }) {
		t.Errorf("Resign with none changed headers: %v -> %v", before, h)
	}
}

func TestResignReplacesNonCanonicalKeys(t *testing.T) {
	// Recorded headers may be stored with whatever case the sender used.
	body := []byte("{}")
	h := http.Header{"stripe-signature": {"t=1,v1=00"}, "x-other": {"kept"}}
	cfg := signature.Config{Scheme: signature.Stripe, Secrets: []string{"s"}}
	if err := signature.Resign(cfg, h, body, now); err != nil {
		t.Fatal(err)
	}
	if _, stale := h["stripe-signature"]; stale || len(h) != 2 {
		t.Fatalf("stale signature left behind: %v", h)
	}
	if got, want := h.Get("Stripe-Signature"), signStripe("s", body, now).Get("Stripe-Signature"); got != want {
		t.Errorf("Stripe-Signature = %q, want %q", got, want)
	}

	sh := http.Header{"webhook-id": {"msg_lowercase"}}
	scfg := signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{specSecret}}
	if err := signature.Resign(scfg, sh, body, now); err != nil {
		t.Fatalf("recorded lowercase webhook-id not found: %v", err)
	}
	if got := sh.Get("webhook-id"); got != "msg_lowercase" || len(sh) != 3 {
		t.Errorf("headers after resign = %v", sh)
	}
}

func TestResignErrors(t *testing.T) {
	cfg := signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{specSecret}}
	h := http.Header{"X-Keep": {"1"}}
	if err := signature.Resign(cfg, h, nil, now); !errors.Is(err, signature.ErrMissing) {
		t.Errorf("Resign without webhook-id = %v, want ErrMissing", err)
	}
	if len(h) != 1 {
		t.Errorf("failed Resign changed headers: %v", h)
	}
	if err := signature.Resign(signature.Config{Scheme: "foo"}, http.Header{}, nil, now); err == nil {
		t.Error("Resign accepted an invalid config")
	}
}

// A recording that carries both spellings of Shopify's signature has both
// signed again: a stale one left beside would be read by a checker that
// prefers it.
func TestResignShopifyBothSpellings(t *testing.T) {
	body := []byte(`{"id":1}`)
	h := signShopify("old", body, now)
	h.Set("Shopify-Hmac-Sha256", h.Get("X-Shopify-Hmac-Sha256"))
	if err := signature.Resign(signature.Config{Scheme: signature.Shopify, Secrets: []string{"new"}}, h, body, now); err != nil {
		t.Fatal(err)
	}
	want := signShopify("new", body, now).Get("X-Shopify-Hmac-Sha256")
	if h.Get("X-Shopify-Hmac-Sha256") != want || h.Get("Shopify-Hmac-Sha256") != want {
		t.Errorf("headers = %v, want both %s", h, want)
	}
}
