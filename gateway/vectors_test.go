package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// providerVector is one delivery signed by a provider's own library or as
// its docs describe and accepted by its own verifier; see
// signature/testdata/providers/gen.mjs.
type providerVector struct {
	Name       string            `json:"name"`
	Scheme     string            `json:"scheme"`
	Secret     string            `json:"secret"`
	At         int64             `json:"at"`
	Headers    map[string]string `json:"headers"`
	Body       string            `json:"body"`
	RequestID  string            `json:"request_id"`
	DeliveryID string            `json:"delivery_id"`
	Challenge  string            `json:"challenge"`
}

// Every provider vector is taken by a source that sets nothing but its
// scheme and secret: the signature headers and the preset selectors read
// each spelling the providers send.
func TestProviderVectorsThroughPresets(t *testing.T) {
	raw, err := os.ReadFile("../signature/testdata/providers/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []providerVector
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{}
	for _, v := range vectors {
		secrets[v.Scheme] = v.Secret
	}
	var cfg strings.Builder
	cfg.WriteString("sources:\n")
	for scheme, secret := range secrets {
		fmt.Fprintf(&cfg, "  - { name: %s, verify: { scheme: %s, secrets: [%q] } }\n", scheme, scheme, secret)
	}
	f := newFixtureFor(t, cfg.String(), nil)
	for _, v := range vectors {
		f.server.now = func() time.Time { return time.Unix(v.At, 0) }
		req := httptest.NewRequest(http.MethodPost, "/hooks/"+v.Scheme, strings.NewReader(v.Body))
		req.Header.Set("Content-Type", "application/json")
		for k, value := range v.Headers {
			req.Header.Set(k, value)
		}
		r := f.do(req)
		if v.Challenge != "" {
			if r.status != 200 || r.body["challenge"] != v.Challenge {
				t.Errorf("%s: %d %v, want 200 with the challenge", v.Name, r.status, r.body)
			}
			continue
		}
		want := map[string]any{"decision": "accepted", "request_id": v.RequestID, "delivery_id": nil}
		if v.DeliveryID != "" {
			want["delivery_id"] = v.DeliveryID
		}
		if r.status != 202 {
			t.Errorf("%s: %d %v, want 202", v.Name, r.status, r.body)
			continue
		}
		for k, value := range want {
			if r.body[k] != value {
				t.Errorf("%s: %s = %v, want %v", v.Name, k, r.body[k], value)
			}
		}
	}
}
