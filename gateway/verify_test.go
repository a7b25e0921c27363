package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Secrets for the tests only. The Standard Webhooks ones are whsec_ + base64.
const (
	oldSecret    = "old-secret"
	newSecret    = "new-secret"
	oldStdSecret = "whsec_b2xkLXN0YW5kYXJkLXNlY3JldC0xMjM0NTY3OA=="
	newStdSecret = "whsec_bmV3LXN0YW5kYXJkLXNlY3JldC0xMjM0NTY3OA=="
)

var verifyConfig = fmt.Sprintf(`
sources:
  - { name: github, request_id: "json:id", verify: { scheme: github, secrets: [%[1]q, %[2]q] } }
  - { name: shopify, request_id: "json:id", verify: { scheme: shopify, secrets: [%[1]q, %[2]q] } }
  - { name: stripe, request_id: "json:id", verify: { scheme: stripe, secrets: [%[1]q, %[2]q], tolerance: 5m } }
  - { name: slack, request_id: "json:id", verify: { scheme: slack, secrets: [%[1]q, %[2]q] } }
  - { name: standard, request_id: "json:id", verify: { scheme: standard-webhooks, secrets: [%[3]q, %[4]q] } }
  - { name: internal, request_id: "json:id", verify: { scheme: hmac-sha256, secrets: [%[1]q, %[2]q], header: X-Signature, prefix: "sha256=", encoding: hex } }
`, newSecret, oldSecret, newStdSecret, oldStdSecret)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Independent signing code: HMAC-SHA256 written out here, not the
// signature package's, so a bug there cannot sign and verify alike.
func mac(key []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func stdKey(secret string) []byte {
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	return k
}

// signers set a scheme's headers for body, signed with secret at ts.
var signers = map[string]func(h http.Header, secret, body string, ts time.Time){
	"github": func(h http.Header, secret, body string, _ time.Time) {
		h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac([]byte(secret), body)))
	},
	"shopify": func(h http.Header, secret, body string, _ time.Time) {
		h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac([]byte(secret), body)))
	},
	"stripe": func(h http.Header, secret, body string, ts time.Time) {
		t := fmt.Sprint(ts.Unix())
		h.Set("Stripe-Signature", "t="+t+",v1="+hex.EncodeToString(mac([]byte(secret), t, ".", body)))
	},
	"slack": func(h http.Header, secret, body string, ts time.Time) {
		t := fmt.Sprint(ts.Unix())
		h.Set("X-Slack-Request-Timestamp", t)
		h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac([]byte(secret), "v0:", t, ":", body)))
	},
	"standard": func(h http.Header, secret, body string, ts time.Time) {
		t := fmt.Sprint(ts.Unix())
		h.Set("webhook-id", "msg_1")
		h.Set("webhook-timestamp", t)
		h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac(stdKey(secret), "msg_1.", t, ".", body)))
	},
	"internal": func(h http.Header, secret, body string, _ time.Time) {
		h.Set("X-Signature", "sha256="+hex.EncodeToString(mac([]byte(secret), body)))
	},
}

// signatureHeader is the header each scheme's malformed case garbles.
var signatureHeader = map[string]string{
	"github": "X-Hub-Signature-256", "shopify": "X-Shopify-Hmac-Sha256", "stripe": "Stripe-Signature",
	"slack": "X-Slack-Signature", "standard": "webhook-signature", "internal": "X-Signature",
}

var timestamped = map[string]bool{"stripe": true, "slack": true, "standard": true}

func TestSignatureVerification(t *testing.T) {
	f := newFixtureFor(t, verifyConfig, nil)
	f.server.now = func() time.Time { return now }

	for scheme, sign := range signers {
		secret, old := newSecret, oldSecret
		if scheme == "standard" {
			secret, old = newStdSecret, oldStdSecret
		}
		n := 0
		send := func(body string, prepare func(h http.Header)) response {
			req := httptest.NewRequest(http.MethodPost, "/hooks/"+scheme, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			prepare(req.Header)
			return f.do(req)
		}
		body := func() (string, string) {
			n++
			id := fmt.Sprintf("%s-%d", scheme, n)
			return id, fmt.Sprintf(`{"id":%q}`, id)
		}
		refused := func(name, reason string, prepare func(id, body string, h http.Header)) {
			t.Helper()
			id, b := body()
			r := send(b, func(h http.Header) { prepare(id, b, h) })
			if r.status != 401 || r.body["reason"] != reason || r.body["error"] == "" {
				t.Errorf("%s %s: %d %v, want 401 %s", scheme, name, r.status, r.body, reason)
			}
			if f.hasReceipt(scheme, id) {
				t.Errorf("%s %s: a receipt was written", scheme, name)
			}
		}

		id, b := body()
		if r := send(b, func(h http.Header) { sign(h, secret, b, now) }); r.status != 202 {
			t.Errorf("%s good signature: %d %v", scheme, r.status, r.body)
		}
		if !f.hasReceipt(scheme, id) {
			t.Errorf("%s good signature: no receipt", scheme)
		}
		id, b = body()
		if r := send(b, func(h http.Header) { sign(h, old, b, now) }); r.status != 202 {
			t.Errorf("%s signed with the old secret while both are listed: %d %v", scheme, r.status, r.body)
		}
		refused("wrong secret", "signature_mismatch", func(_, b string, h http.Header) {
			w := "wrong-secret"
			if scheme == "standard" {
				w = "whsec_d3Jvbmctc3RhbmRhcmQtc2VjcmV0LTEyMzQ="
			}
			sign(h, w, b, now)
		})
		refused("tampered body", "signature_mismatch", func(_, b string, h http.Header) {
			sign(h, secret, strings.Replace(b, "}", `,"amount":1}`, 1), now)
		})
		refused("missing header", "missing_signature", func(string, string, http.Header) {})
		refused("malformed header", "malformed_signature", func(_, b string, h http.Header) {
			sign(h, secret, b, now)
			h.Set(signatureHeader[scheme], "%%garbage%%")
		})
		if timestamped[scheme] {
			refused("timestamp too old", "timestamp_out_of_tolerance", func(_, b string, h http.Header) {
				sign(h, secret, b, now.Add(-6*time.Minute))
			})
			refused("timestamp in the future", "timestamp_out_of_tolerance", func(_, b string, h http.Header) {
				sign(h, secret, b, now.Add(6*time.Minute))
			})
		}
	}
}

func TestRotationEndsWhenTheOldSecretIsRemoved(t *testing.T) {
	f := newFixtureFor(t, fmt.Sprintf(`sources: [{name: github, request_id: "json:id", verify: {scheme: github, secrets: [%q]}}]`, newSecret), nil)
	f.server.now = func() time.Time { return now }
	req := httptest.NewRequest(http.MethodPost, "/hooks/github", strings.NewReader(`{"id":"x"}`))
	signers["github"](req.Header, oldSecret, `{"id":"x"}`, now)
	if r := f.do(req); r.status != 401 {
		t.Errorf("old secret after rotation: %d, want 401", r.status)
	}
}
