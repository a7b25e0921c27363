package configs

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Secrets of the fixture below: none may survive masking.
const (
	testAdminToken  = "admin-token-7f3a"
	testVerifyOld   = "gh-secret-old-19c2"
	testVerifyNew   = "gh-secret-new-88d1"
	testSignSecret  = "whsec_c2lnbmluZy1zZWNyZXQtZm9yLXRlc3Rz"
	testBearer      = "Bearer downstream-credential-5e0b"
	testHeaderValue = "tenant-key-d41d"
	testURLPassword = "url-password-a9e4"
	testAuditSecret = "whsec_YXVkaXQtc2lnbmluZy1zZWNyZXQtZm9yLXRlc3Rz"
	testAuditBearer = "Bearer audit-credential-77c1"
	testAuditPass   = "audit-password-0b3e"
)

// fullConfig sets every optional section, so that the deep-copy check below
// reaches every pointer, slice and map Config holds.
func fullConfig(t *testing.T) *Config {
	t.Helper()
	t.Setenv("WEBHOOKD_TEST_ADMIN_TOKEN", testAdminToken)
	files := writeTLSFiles(t)
	cfg, err := Parse([]byte(`
tls: { cert_file: ` + files.cert + `, key_file: ` + files.key + ` }
admin: { listen: "127.0.0.1:8081", token: "${WEBHOOKD_TEST_ADMIN_TOKEN}", tls: { cert_file: ` + files.cert + `, key_file: ` + files.key + ` } }
record: { path: /tmp/rec, redact: [X-Api-Key] }
tracing: { endpoint: "http://otel:4318", sample_ratio: 0.5 }
sources:
  - name: gh
    verify: { scheme: github, secrets: ["` + testVerifyOld + `", "` + testVerifyNew + `", ""] }
    record: { path: /tmp/gh, redact: [X-Hub-Signature-256] }
    fingerprint_exclude: [sent_at]
    responses: { stale: 409 }
    routes:
      - name: ci
        filter: 'headers["x-github-event"] == "push"'
        url: https://hooks:` + testURLPassword + `@127.0.0.1:9000/gh
        tls: { ca_file: ` + files.ca + ` }
        headers: { Authorization: "` + testBearer + `", X-Tenant-Key: "` + testHeaderValue + `", X-Empty: "" }
        pass_headers: [X-GitHub-Event]
        sign: { secret: "` + testSignSecret + `" }
      - name: audit
        url: https://audit:` + testAuditPass + `@audit.internal/gh
        headers: { Authorization: "` + testAuditBearer + `" }
        pass_headers: [X-GitHub-Delivery]
        tls: { cert_file: ` + files.cert + `, key_file: ` + files.key + ` }
        sign: { secret: "` + testAuditSecret + `" }
  - name: plain
    request_id: header:Idempotency-Key
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestMaskedHidesEverySecret(t *testing.T) {
	cfg := fullConfig(t)
	m := cfg.Masked()

	if m.Admin.Token != MaskedSecret {
		t.Errorf("admin.token = %q", m.Admin.Token)
	}
	gh := m.Sources[0]
	if want := []string{MaskedSecret, MaskedSecret, ""}; !reflect.DeepEqual(gh.Verify.Secrets, want) {
		t.Errorf("verify.secrets = %q, want %q (an empty entry stays empty)", gh.Verify.Secrets, want)
	}
	ci, audit := gh.Routes[0], gh.Routes[1]
	if ci.Sign.Secret != MaskedSecret || audit.Sign.Secret != MaskedSecret {
		t.Errorf("routes' sign.secret = %q, %q", ci.Sign.Secret, audit.Sign.Secret)
	}
	wantHeaders := map[string]string{"Authorization": MaskedSecret, "X-Tenant-Key": MaskedSecret, "X-Empty": ""}
	if !reflect.DeepEqual(ci.Headers, wantHeaders) || !reflect.DeepEqual(audit.Headers, map[string]string{"Authorization": MaskedSecret}) {
		t.Errorf("routes' headers = %q, %q; want %q and Authorization masked", ci.Headers, audit.Headers, wantHeaders)
	}

	// However it is printed, no secret may show, nor anything of its length.
	out, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://hooks:****@127.0.0.1:9000/gh"; ci.URL != want {
		t.Errorf("routes[0].url = %q, want %q", ci.URL, want)
	}
	if want := "https://audit:****@audit.internal/gh"; audit.URL != want {
		t.Errorf("routes[1].url = %q, want %q", audit.URL, want)
	}
	for _, secret := range []string{testAdminToken, testVerifyOld, testVerifyNew, testSignSecret, testBearer, "Bearer", testHeaderValue, testURLPassword,
		testAuditSecret, testAuditBearer, testAuditPass} {
		if strings.Contains(string(out), secret) {
			t.Errorf("masked configuration shows %q:\n%s", secret, out)
		}
	}

	// Everything that is not a secret is kept.
	if m.Listen != cfg.Listen || m.ReceiptTTL != cfg.ReceiptTTL ||
		gh.Verify.Scheme != "github" || gh.RequestID != "header:X-GitHub-Delivery" || m.Record.Path != "/tmp/rec" ||
		!reflect.DeepEqual(ci.PassHeaders, []string{"X-GitHub-Event"}) || gh.Responses["stale"] != 409 ||
		ci.Name != "ci" || ci.Filter != `headers["x-github-event"] == "push"` || ci.Match != cfg.Sources[0].Routes[0].Match || audit.Name != "audit" {
		t.Errorf("masking changed more than the secrets: %+v", m)
	}
}

func TestMaskedHidesTheDSNPassword(t *testing.T) {
	for _, tt := range []struct{ dsn, want string }{
		{"postgres://webhookd:" + testURLPassword + "@db:5432/webhookd?sslmode=verify-full", "postgres://webhookd:****@db:5432/webhookd?sslmode=verify-full"},
		{"postgres://webhookd@db/webhookd?password=" + testURLPassword + "&sslmode=require", "postgres://webhookd@db/webhookd?password=****&sslmode=require"},
		{"host=db user=webhookd password=" + testURLPassword + " dbname=webhookd", "host=db user=webhookd password=**** dbname=webhookd"},
		{`host=db password = 'it\'s ` + testURLPassword + "' dbname=webhookd", "host=db password = **** dbname=webhookd"},
		{"postgres://webhookd@db/webhookd", "postgres://webhookd@db/webhookd"},
	} {
		c := New()
		c.Storage.DSN = tt.dsn
		if got := c.Masked().Storage.DSN; got != tt.want {
			t.Errorf("masked %q = %q, want %q", tt.dsn, got, tt.want)
		}
	}
}

func TestMaskedLeavesUnsetSecretsEmpty(t *testing.T) {
	t.Setenv("WEBHOOKD_ADMIN_TOKEN", "")
	cfg, err := Parse(Example())
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Masked(); m.Admin.Token != "" {
		t.Errorf("unset admin.token masks as %q, want empty so that a reader sees it is unset", m.Admin.Token)
	}
}

func TestMaskedDoesNotChangeTheOriginal(t *testing.T) {
	cfg := fullConfig(t)
	want := fullConfig(t)
	// Each fixture has TLS files of its own.
	want.TLS, want.Admin.TLS = cfg.TLS, cfg.Admin.TLS
	for j, r := range cfg.Sources[0].Routes {
		want.Sources[0].Routes[j].TLS = r.TLS
	}
	// Two compilations of one filter are not deeply equal; the compiled
	// filter is not the masking's to change.
	for i := range want.Sources {
		for j := range want.Sources[i].Routes {
			want.Sources[i].Routes[j].Match = cfg.Sources[i].Routes[j].Match
		}
	}
	m := cfg.Masked()
	if !reflect.DeepEqual(cfg, want) {
		t.Fatal("Masked changed its receiver")
	}
	// Writing through the copy must not reach the original either.
	m.Sources[0].Routes[0].Headers["Authorization"] = "changed"
	m.Sources[0].Routes[1].PassHeaders[0] = "changed"
	m.Sources[0].Verify.Secrets[0] = "changed"
	m.Sources[0].Responses["stale"] = 299
	m.Record.Redact[0] = "changed"
	if !reflect.DeepEqual(cfg, want) {
		t.Error("the masked copy shares memory with the original")
	}
}

// TestMaskedIsADeepCopy walks both configurations and fails on any pointer,
// map or slice they share, so a field added to Config later without a copy
// in Masked is caught. It also fails when the fixture leaves such a field
// nil, since the walk could not see sharing there.
func TestMaskedIsADeepCopy(t *testing.T) {
	cfg := fullConfig(t)
	assertNoSharing(t, "config", reflect.ValueOf(cfg), reflect.ValueOf(cfg.Masked()))
}

func assertNoSharing(t *testing.T, path string, a, b reflect.Value) {
	t.Helper()
	switch a.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice:
		if a.IsNil() {
			if !strings.HasPrefix(path, "config.sources[1]") { // the plain source leaves its options unset on purpose
				t.Errorf("%s is nil in the fixture: set it so the deep-copy check covers it", path)
			}
			return
		}
		if a.Kind() != reflect.Slice || a.Len() > 0 {
			if a.UnsafePointer() == b.UnsafePointer() {
				t.Errorf("%s is shared between the configuration and its masked copy", path)
			}
		}
	}
	switch a.Kind() {
	case reflect.Pointer:
		assertNoSharing(t, path, a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			name := yamlName(a.Type().Field(i))
			if name == "-" {
				continue // a route's compiled filter, which nothing changes, is shared
			}
			assertNoSharing(t, path+"."+name, a.Field(i), b.Field(i))
		}
	case reflect.Slice:
		for i := range a.Len() {
			assertNoSharing(t, path+"["+strconv.Itoa(i)+"]", a.Index(i), b.Index(i))
		}
	case reflect.Map:
		for _, k := range a.MapKeys() {
			assertNoSharing(t, path+"["+k.String()+"]", a.MapIndex(k), b.MapIndex(k))
		}
	}
}
