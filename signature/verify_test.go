package signature_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/webhookd/webhookd/signature"
)

var now = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

type signFunc func(secret string, body []byte, ts time.Time) http.Header

// schemeCase describes one scheme for the shared table of checks.
type schemeCase struct {
	name       string
	cfg        signature.Config // Secrets are filled in per check
	oldSecret  string
	newSecret  string
	sign       signFunc
	sigHeader  string   // the header holding the MAC
	required   []string // every header whose absence is ErrMissing
	malformed  []string // values of sigHeader that cannot be parsed
	timestamps bool
}

var schemeCases = []schemeCase{
	{
		name:      "github",
		cfg:       signature.Config{Scheme: signature.GitHub},
		oldSecret: "old github secret", newSecret: "new github secret",
		sign: signGitHub, sigHeader: "X-Hub-Signature-256",
		required:  []string{"X-Hub-Signature-256"},
		malformed: []string{"757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "sha256=zz", "sha256=abcd", "sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"},
	},
	{
		name:      "shopify",
		cfg:       signature.Config{Scheme: signature.Shopify},
		oldSecret: "old shopify secret", newSecret: "new shopify secret",
		sign: signShopify, sigHeader: "X-Shopify-Hmac-Sha256",
		required:  []string{"X-Shopify-Hmac-Sha256"},
		malformed: []string{"not base64!", "AAAA", "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE"},
	},
	{
		name:      "stripe",
		cfg:       signature.Config{Scheme: signature.Stripe},
		oldSecret: "whsec_oldStripeSecret", newSecret: "whsec_newStripeSecret",
		sign: signStripe, sigHeader: "Stripe-Signature",
		required: []string{"Stripe-Signature"},
		malformed: []string{
			"v1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", // no t
			"t=1773500966", // no v1
			"t=1773500966,v0=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", // only v0
			"t=abc,v1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",        // bad t
			"t=1773500966,v1=xyz", // bad hex
			"t=1,t=2,v1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",      // two t
			"t=1773500966;v1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", // wrong separator
		},
		timestamps: true,
	},
	{
		name:      "slack",
		cfg:       signature.Config{Scheme: signature.Slack},
		oldSecret: "8f742231b10e8888abcd99yyyzzz85a5", newSecret: "0123456789abcdef0123456789abcdef",
		sign: signSlack, sigHeader: "X-Slack-Signature",
		required:   []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"},
		malformed:  []string{"a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503", "v1=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503", "v0=nothex"},
		timestamps: true,
	},
	{
		name:      "standard-webhooks",
		cfg:       signature.Config{Scheme: signature.StandardWebhooks},
		oldSecret: specSecret, newSecret: whsec("a freshly rotated key, 32 bytes"),
		sign: signStandardWebhooks, sigHeader: "webhook-signature",
		required: []string{"webhook-id", "webhook-timestamp", "webhook-signature"},
		malformed: []string{
			"g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",     // no version
			"v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", // no v1 entry at all
			"v1,not-base64",
			"v2,abc v3,def",
		},
		timestamps: true,
	},
	{
		name:      "standard-webhooks with Svix's header names",
		cfg:       signature.Config{Scheme: signature.StandardWebhooks},
		oldSecret: specSecret, newSecret: whsec("a freshly rotated key, 32 bytes"),
		sign: signSvix, sigHeader: "svix-signature",
		required:   []string{"svix-timestamp", "svix-signature"}, // without svix-id it is webhook-id that is missing
		malformed:  []string{"g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "v1,not-base64"},
		timestamps: true,
	},
	{
		name:      "shopify Events deliveries",
		cfg:       signature.Config{Scheme: signature.Shopify},
		oldSecret: "old shopify secret", newSecret: "new shopify secret",
		sign: signShopifyEvents, sigHeader: "Shopify-Hmac-Sha256",
		malformed: []string{"not base64!", "AAAA"},
	},
	{
		name:      "hmac-sha256 hex",
		cfg:       signature.Config{Scheme: signature.HMACSHA256, Header: "X-Signature"},
		oldSecret: "old generic", newSecret: "new generic",
		sign: signGenericHex, sigHeader: "X-Signature",
		required:  []string{"X-Signature"},
		malformed: []string{"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="},
	},
	{
		name:      "hmac-sha256 base64 with prefix",
		cfg:       signature.Config{Scheme: signature.HMACSHA256, Header: "X-Webhook-Signature", Encoding: "base64", Prefix: "sha256="},
		oldSecret: "old generic", newSecret: "new generic",
		sign: signGenericBase64, sigHeader: "X-Webhook-Signature",
		required:  []string{"X-Webhook-Signature"},
		malformed: []string{"g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"},
	},
}

func (c schemeCase) verifier(t *testing.T, secrets ...string) signature.Verifier {
	t.Helper()
	cfg := c.cfg
	cfg.Secrets = secrets
	v, err := signature.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return v
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if target == nil {
		if err != nil {
			t.Fatalf("Verify = %v, want success", err)
		}
		return
	}
	if !errors.Is(err, target) {
		t.Fatalf("Verify = %v, want %v", err, target)
	}
	var se *signature.Error
	if !errors.As(err, &se) || se.Header == "" {
		t.Fatalf("Verify = %#v, want a *signature.Error naming its header", err)
	}
}

func TestVerifySchemes(t *testing.T) {
	body := []byte(`{"id":"evt_1","type":"thing.updated","data":{"object":{"id":"th_1"}}}`)
	for _, c := range schemeCases {
		t.Run(c.name, func(t *testing.T) {
			v := c.verifier(t, c.oldSecret)

			t.Run("good signature", func(t *testing.T) {
				wantErr(t, v.Verify(c.sign(c.oldSecret, body, now), body, now), nil)
			})
			t.Run("wrong secret", func(t *testing.T) {
				wantErr(t, v.Verify(c.sign(c.newSecret, body, now), body, now), signature.ErrMismatch)
			})
			t.Run("tampered body", func(t *testing.T) {
				tampered := append([]byte(nil), body...)
				tampered[len(tampered)-2] = ']'
				wantErr(t, v.Verify(c.sign(c.oldSecret, body, now), tampered, now), signature.ErrMismatch)
			})
			t.Run("empty body signed", func(t *testing.T) {
				wantErr(t, v.Verify(c.sign(c.oldSecret, nil, now), nil, now), nil)
			})
			for _, name := range c.required {
				t.Run("missing "+name, func(t *testing.T) {
					h := c.sign(c.oldSecret, body, now)
					h.Del(name)
					err := v.Verify(h, body, now)
					wantErr(t, err, signature.ErrMissing)
					var se *signature.Error
					errors.As(err, &se)
					if se.Header != name {
						t.Errorf("Header = %q, want %q", se.Header, name)
					}
				})
				t.Run("blank "+name, func(t *testing.T) {
					h := c.sign(c.oldSecret, body, now)
					h.Set(name, "  ")
					wantErr(t, v.Verify(h, body, now), signature.ErrMissing)
				})
			}
			for _, value := range c.malformed {
				t.Run("malformed "+value, func(t *testing.T) {
					h := c.sign(c.oldSecret, body, now)
					h.Set(c.sigHeader, value)
					wantErr(t, v.Verify(h, body, now), signature.ErrMalformed)
				})
			}
			t.Run("rotation", func(t *testing.T) {
				h := c.sign(c.oldSecret, body, now)
				wantErr(t, c.verifier(t, c.newSecret, c.oldSecret).Verify(h, body, now), nil)
				wantErr(t, c.verifier(t, "", c.newSecret, "", c.oldSecret).Verify(h, body, now), nil)
				wantErr(t, c.verifier(t, c.newSecret).Verify(h, body, now), signature.ErrMismatch)
				wantErr(t, c.verifier(t, c.newSecret, c.oldSecret).Verify(c.sign(c.newSecret, body, now), body, now), nil)
			})
			if !c.timestamps {
				t.Run("timestamps ignored", func(t *testing.T) {
					wantErr(t, v.Verify(c.sign(c.oldSecret, body, now), body, now.Add(1000*time.Hour)), nil)
				})
				return
			}
			tol := signature.DefaultTolerance
			for _, tc := range []struct {
				name   string
				signed time.Time
				want   error
			}{
				{"just inside past", now.Add(-tol + time.Second), nil},
				{"just inside future", now.Add(tol - time.Second), nil},
				{"exactly at tolerance", now.Add(-tol), nil},
				{"too old", now.Add(-tol - time.Second), signature.ErrTimestamp},
				{"too far in the future", now.Add(tol + time.Second), signature.ErrTimestamp},
				{"epoch", time.Unix(0, 0), signature.ErrTimestamp},
			} {
				t.Run(tc.name, func(t *testing.T) {
					wantErr(t, v.Verify(c.sign(c.oldSecret, body, tc.signed), body, now), tc.want)
				})
			}
			t.Run("tolerance checked before the MAC", func(t *testing.T) {
				h := c.sign(c.newSecret, body, now.Add(-time.Hour))
				wantErr(t, v.Verify(h, body, now), signature.ErrTimestamp)
			})
			t.Run("custom tolerance", func(t *testing.T) {
				cfg := c.cfg
				cfg.Secrets = []string{c.oldSecret}
				cfg.Tolerance = time.Minute
				short, err := signature.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				h := c.sign(c.oldSecret, body, now.Add(-2*time.Minute))
				wantErr(t, short.Verify(h, body, now), signature.ErrTimestamp)
				wantErr(t, v.Verify(h, body, now), nil)
			})
		})
	}
}

func TestVerifyNoneAcceptsEverything(t *testing.T) {
	for _, scheme := range []string{"", signature.None} {
		v, err := signature.New(signature.Config{Scheme: scheme})
		if err != nil {
			t.Fatalf("New(%q): %v", scheme, err)
		}
		if v == nil {
			t.Fatalf("New(%q) returned a nil verifier", scheme)
		}
		if err := v.Verify(http.Header{}, []byte("anything"), time.Time{}); err != nil {
			t.Errorf("none verifier refused a delivery: %v", err)
		}
	}
}

func TestStripeMultipleSignatures(t *testing.T) {
	const secret = "whsec_stripe"
	body := []byte(`{"id":"evt_1"}`)
	v, err := signature.New(signature.Config{Scheme: signature.Stripe, Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	good := signStripe(secret, body, now).Get("Stripe-Signature")
	other := signStripe("some other secret", body, now).Get("Stripe-Signature")
	goodV1 := good[len("t=1773500966,"):]
	otherV1 := other[len("t=1773500966,"):]
	ts := "t=" + unix(now)
	for _, tc := range []struct {
		header string
		want   error
	}{
		{ts + "," + otherV1 + "," + goodV1, nil},
		{ts + "," + goodV1 + "," + otherV1, nil},
		{ts + ",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39," + goodV1, nil},
		{goodV1 + "," + ts + ",scheme=future", nil},
		{ts + "," + otherV1, signature.ErrMismatch},
		{ts + "," + otherV1 + ",v0=" + goodV1[len("v1="):], signature.ErrMismatch}, // the right MAC under v0 does not count
	} {
		h := http.Header{}
		h.Set("Stripe-Signature", tc.header)
		if err := v.Verify(h, body, now); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("Verify(%q) = %v, want %v", tc.header, err, tc.want)
		}
	}
}

func TestStandardWebhooksSignatureList(t *testing.T) {
	body := []byte(specBody)
	at := time.Unix(specTS, 0)
	v, err := signature.New(signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{specSecret}})
	if err != nil {
		t.Fatal(err)
	}
	const other = "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="
	const asym = "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg=="
	for _, tc := range []struct {
		header string
		want   error
	}{
		{other + " " + specSig, nil},
		{specSig + " " + other, nil},
		{asym + " " + specSig, nil},
		{specSig + "  " + other + " ", nil},
		{other, signature.ErrMismatch},
		{asym + " " + other, signature.ErrMismatch},
		{asym, signature.ErrMalformed},
		{specSig + "," + other, signature.ErrMalformed},
	} {
		h := http.Header{}
		h.Set("webhook-id", specID)
		h.Set("webhook-timestamp", "1614265330")
		h.Set("webhook-signature", tc.header)
		if err := v.Verify(h, body, at); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("Verify(%q) = %v, want %v", tc.header, err, tc.want)
		}
	}

	// The id is part of the signed content.
	h := http.Header{}
	h.Set("webhook-id", "msg_someoneelse")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", specSig)
	if err := v.Verify(h, body, at); !errors.Is(err, signature.ErrMismatch) {
		t.Errorf("Verify with another id = %v, want mismatch", err)
	}
}

func TestMalformedTimestamps(t *testing.T) {
	body := []byte("{}")
	for _, c := range schemeCases {
		if !c.timestamps {
			continue
		}
		v := c.verifier(t, c.oldSecret)
		for _, bad := range []string{"soon", "-1", "+1773500966", "1773500966.5", "01773500966", "99999999999999999999"} {
			h := c.sign(c.oldSecret, body, now)
			switch {
			case c.name == "stripe":
				h.Set("Stripe-Signature", "t="+bad+h.Get("Stripe-Signature")[len("t=1773500966"):])
			case c.name == "slack":
				h.Set("X-Slack-Request-Timestamp", bad)
			case h.Get("svix-timestamp") != "":
				h.Set("svix-timestamp", bad)
			default:
				h.Set("webhook-timestamp", bad)
			}
			if err := v.Verify(h, body, now); !errors.Is(err, signature.ErrMalformed) {
				t.Errorf("%s with timestamp %q: Verify = %v, want malformed", c.name, bad, err)
			}
		}
	}
}

func TestErrorMessages(t *testing.T) {
	v, err := signature.New(signature.Config{Scheme: signature.Stripe, Secrets: []string{"s"}})
	if err != nil {
		t.Fatal(err)
	}
	h := signStripe("s", []byte("{}"), now.Add(-time.Hour))
	err = v.Verify(h, []byte("{}"), now)
	const want = "signature: header Stripe-Signature: timestamp 1773497366 is 1h0m0s old, more than the 5m0s tolerance"
	if err == nil || err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	for _, tc := range []struct {
		err  *signature.Error
		want string
	}{
		{&signature.Error{Reason: signature.ReasonMissing, Header: "X-Hub-Signature-256"}, "signature: header X-Hub-Signature-256: missing"},
		{&signature.Error{Reason: signature.ReasonMismatch, Header: "X-Sig"}, "signature: header X-Sig: signature does not match any configured secret"},
		{signature.ErrTimestamp, "signature: timestamp outside the allowed tolerance"},
		{&signature.Error{Reason: signature.ReasonMalformed, Header: "H", Msg: "bad"}, "signature: header H: bad"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	if errors.Is(&signature.Error{Reason: signature.ReasonMissing}, signature.ErrMismatch) {
		t.Error("a missing-signature error matched ErrMismatch")
	}
	if errors.Is(errors.New("missing_signature"), signature.ErrMissing) {
		t.Error("a foreign error matched ErrMissing")
	}
}

// The spelling is chosen by the ID header, as the request-ID preset
// (header:webhook-id|header:svix-id) chooses: the ID a delivery is keyed on
// is always one its signature covers.
func TestStandardWebhooksHeaderSpellings(t *testing.T) {
	body := []byte(specBody)
	at := time.Unix(specTS, 0)
	v, err := signature.New(signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{specSecret}})
	if err != nil {
		t.Fatal(err)
	}
	std := http.Header{}
	std.Set("webhook-id", specID)
	std.Set("webhook-timestamp", "1614265330")
	std.Set("webhook-signature", specSig)
	svix := http.Header{}
	svix.Set("svix-id", specID)
	svix.Set("svix-timestamp", "1614265330")
	svix.Set("svix-signature", specSig)
	both := std.Clone()
	for k, vs := range svix {
		both[k] = vs
	}
	forged := svix.Clone()
	forged.Set("webhook-id", "msg_chosen_by_someone_else")
	for _, tc := range []struct {
		name   string
		h      http.Header
		want   error
		header string
	}{
		{"webhook-*", std, nil, ""},
		{"svix-*", svix, nil, ""},
		{"both", both, nil, ""},
		{"a webhook-id beside signed svix-* headers", forged, signature.ErrMissing, "webhook-timestamp"},
		{"neither", http.Header{}, signature.ErrMissing, "webhook-id"},
	} {
		err := v.Verify(tc.h, body, at)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var se *signature.Error
		if !errors.Is(err, tc.want) || !errors.As(err, &se) || se.Header != tc.header {
			t.Errorf("%s: %v, want %v naming %s", tc.name, err, tc.want, tc.header)
		}
	}
	err = v.Verify(http.Header{}, body, at)
	if want := "signature: header webhook-id: missing (and so is svix-id)"; err == nil || err.Error() != want {
		t.Errorf("neither: %q, want %q", err, want)
	}
}
