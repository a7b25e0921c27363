package configs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/filter"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/versioning"
)

func TestExampleIsValid(t *testing.T) {
	cfg, err := Parse(Example())
	if err != nil {
		t.Fatal(err)
	}
	demo, ok := cfg.Source("demo")
	if !ok {
		t.Fatal("example has no demo source")
	}
	if cfg.DataDir != "./data" || cfg.Listen != ":8080" || cfg.Admin.Listen != "127.0.0.1:8081" {
		t.Errorf("example = %+v", cfg)
	}
	if demo.RequestID != "json:request_id" || demo.VersionFormat != versioning.Integer {
		t.Errorf("demo = %+v", demo)
	}
	// The shipped file and the embedded copy are the same bytes.
	onDisk, err := os.ReadFile("webhookd.yaml")
	if err != nil || string(onDisk) != string(Example()) {
		t.Errorf("embedded example differs from configs/webhookd.yaml (%v)", err)
	}
}

func TestParseAppliesDefaults(t *testing.T) {
	cfg, err := Parse([]byte("sources: [{name: billing, request_id: 'header:Idempotency-Key'}]"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ReceiptTTL != 168*time.Hour || cfg.MaxBody != 1<<20 || cfg.Log.Level != "info" {
		t.Errorf("defaults not applied: %+v", cfg)
	}
	if cfg.Storage.MinFree != 0 {
		t.Errorf("storage.min_free default = %d, want 0 (derived from Badger's sizes)", cfg.Storage.MinFree)
	}
	s := cfg.Sources[0]
	if s.VersionFormat != "" {
		t.Errorf("version_format without a version = %q, want none", s.VersionFormat)
	}
	if s.Status(webhookd.Accepted) != 202 || s.Status(webhookd.Stale) != 200 || s.Status(webhookd.Conflict) != 422 || s.Status(webhookd.Duplicate) != 200 {
		t.Error("default statuses wrong")
	}
}

func TestStorageDefaults(t *testing.T) {
	cfg, err := Parse([]byte("sources: [{name: billing, request_id: 'header:Idempotency-Key'}]"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Storage.Backend != Badger || cfg.DataDir != "./data" || cfg.Storage.PoolSize != 0 {
		t.Errorf("badger defaults: %+v, data_dir %q", cfg.Storage, cfg.DataDir)
	}
	t.Setenv("WEBHOOKD_TEST_DSN", "postgres://webhookd:pw@db:5432/webhookd")
	cfg, err = Parse([]byte(`
storage: { backend: postgres, dsn: "${WEBHOOKD_TEST_DSN}" }
sources: [{name: billing, request_id: 'header:Idempotency-Key'}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := Storage{Backend: Postgres, DSN: "postgres://webhookd:pw@db:5432/webhookd", PoolSize: 8, StatementTimeout: 5 * time.Second}
	if cfg.Storage != want || cfg.DataDir != "" {
		t.Errorf("postgres defaults: %+v, data_dir %q; want %+v and none", cfg.Storage, cfg.DataDir, want)
	}
}

func TestParseExpandsEnvironmentSafely(t *testing.T) {
	t.Setenv("WEBHOOKD_TEST_TOKEN", `s3cr"et: #not-a-comment`)
	t.Setenv("WEBHOOKD_TEST_TTL", "2h")
	cfg, err := Parse([]byte(`
receipt_ttl: ${WEBHOOKD_TEST_TTL}
admin: { token: "${WEBHOOKD_TEST_TOKEN}" }
sources: [{name: billing, request_id: "json:id"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Admin.Token != `s3cr"et: #not-a-comment` {
		t.Errorf("token = %q", cfg.Admin.Token)
	}
	if cfg.ReceiptTTL != 2*time.Hour {
		t.Errorf("receipt_ttl = %v", cfg.ReceiptTTL)
	}
}

// An expanded value is text: a secret that reads as YAML's null stays
// itself, and a number field refuses one at start.
func TestExpandedValuesStayText(t *testing.T) {
	t.Setenv("WEBHOOKD_TEST_TOKEN", "null")
	t.Setenv("WEBHOOKD_TEST_MAX_BODY", "2048")
	cfg, err := Parse([]byte("admin:\n  token: ${WEBHOOKD_TEST_TOKEN}\nsources: [{name: a, request_id: \"json:id\"}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Admin.Token != "null" {
		t.Errorf("token = %q, want null, as text", cfg.Admin.Token)
	}
	_, err = Parse([]byte("max_body: ${WEBHOOKD_TEST_MAX_BODY}\nsources: [{name: a, request_id: \"json:id\"}]\n"))
	if err == nil || !strings.Contains(err.Error(), "2048") {
		t.Errorf("a number from the environment: %v, want it refused, naming the value", err)
	}
}

func TestParseUnsetVariableIsEmpty(t *testing.T) {
	os.Unsetenv("WEBHOOKD_TEST_UNSET")
	cfg, err := Parse([]byte(`{admin: {token: "${WEBHOOKD_TEST_UNSET}"}, sources: [{name: a, request_id: "json:id"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Admin.Token != "" {
		t.Errorf("token = %q, want empty", cfg.Admin.Token)
	}
}

func TestValidateNamesFieldAndRule(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"no sources", `listen: ":8080"`, []string{"sources: is required"}},
		{"bad selector", `sources: [{name: a, request_id: "body:id"}]`, []string{"sources[0].request_id: must be json:<dotted.path> or header:<Name>"}},
		{"bad alternative", `sources: [{name: a, request_id: "header:webhook-id|svix-id"}]`, []string{"sources[0].request_id: must be json:<dotted.path> or header:<Name> (got header:webhook-id|svix-id)"}},
		{"empty alternative", `sources: [{name: a, request_id: "header:webhook-id||header:svix-id"}]`, []string{"sources[0].request_id: must be json:<dotted.path> or header:<Name>"}},
		{"trailing bar", `sources: [{name: a, request_id: "json:id|"}]`, []string{"sources[0].request_id: must be json:<dotted.path> or header:<Name>"}},
		{"missing request id", `sources: [{name: a}]`, []string{"sources[0].request_id: is required"}},
		{"bad name", `sources: [{name: "Bad Name", request_id: "json:id"}]`, []string{"sources[0].name: must be 1-64 lowercase"}},
		{"duplicate names", `sources: [{name: a, request_id: "json:id"}, {name: a, request_id: "json:id"}]`, []string{"sources: must not repeat a name"}},
		{"version without resource", `sources: [{name: a, request_id: "json:id", version: "json:v"}]`, []string{"sources[0].resource: is required when version is set"}},
		{"bad version format", `sources: [{name: a, request_id: "json:id", resource: "json:r", version: "json:v", version_format: semver}]`, []string{"sources[0].version_format: must be one of: integer, timestamp"}},
		{"bad response status", `sources: [{name: a, request_id: "json:id", responses: {stale: 99}}]`, []string{"sources[0].responses[stale]: must be at least 200"}},
		{"response without a body", `sources: [{name: a, request_id: "json:id", responses: {accepted: 204, duplicate: 304}}]`, []string{"sources[0].responses[accepted]: must be a status that carries a body", "sources[0].responses[duplicate]: must be a status that carries a body"}},
		{"signatures outlive receipts", `{receipt_ttl: 10m, sources: [{name: a, verify: {scheme: stripe, secrets: [s]}}]}`, []string{"sources[0].verify.tolerance: a signed delivery passes for 10m0s", "not less than receipt_ttl 10m0s"}},
		{"bad response key", `sources: [{name: a, request_id: "json:id", responses: {stael: 409}}]`, []string{"sources[0].responses[stael]: must be one of"}},
		{"ttl too short", `{receipt_ttl: 10ms, sources: [{name: a, request_id: "json:id"}]}`, []string{"receipt_ttl: must be at least 1s"}},
		{"bad listen", `{listen: "8080", sources: [{name: a, request_id: "json:id"}]}`, []string{"listen: must be host:port"}},
		{"bad log level", `{log: {level: loud}, sources: [{name: a, request_id: "json:id"}]}`, []string{"log.level: must be one of: debug, info, warn, error"}},
		{"unknown field", `{sources: [{name: a, request_id: "json:id", requestid: "json:x"}]}`, []string{"sources[0].requestid: unknown field (did you mean request_id?)"}},
		{"version format without version", `sources: [{name: a, request_id: "json:id", version_format: integer}]`, []string{"sources[0].version_format: set without version"}},
		{"version ties without version", `sources: [{name: a, request_id: "json:id", version_ties: accept}]`, []string{"sources[0].version_ties: set without version"}},
		{"bad version ties", `sources: [{name: a, request_id: "json:id", resource: "json:r", version: "json:v", version_ties: allow}]`, []string{"sources[0].version_ties: must be one of: stale, accept (got allow)"}},
		{"negative source max_body", `sources: [{name: a, request_id: "json:id", max_body: -1}]`, []string{"sources[0].max_body: must be at least 0 (got -1)"}},
		{"reserved source name", `sources: [{name: unknown, request_id: "json:id"}]`, []string{`sources[0].name: "unknown" is reserved`}},
		{"retries that overflow the window check", `{sources: [{name: a, request_id: "json:id", routes: [{url: "http://127.0.0.1:9/", max_attempts: 30000000, timeout: 1h, backoff: {max: 1000h}}]}]}`, []string{"sources[0].routes[0].max_attempts: retries may take up to"}},
		{"negative reserve", `{storage: {min_free: -1}, sources: [{name: a, request_id: "json:id"}]}`, []string{"storage.min_free: must be at least 0 (got -1)"}},
		{"unknown storage backend", `{storage: {backend: mysql}, sources: [{name: a, request_id: "json:id"}]}`, []string{"storage.backend: must be one of: badger, postgres (got mysql)"}},
		{"data_dir with postgres", `{storage: {backend: postgres, dsn: "postgres://127.0.0.1/db"}, data_dir: /var/lib/webhookd, sources: [{name: a, request_id: "json:id"}]}`, []string{"data_dir: is set, but storage.backend postgres keeps everything in the database"}},
		{"postgres without a dsn", `{storage: {backend: postgres}, sources: [{name: a, request_id: "json:id"}]}`, []string{"storage.dsn: is required with storage.backend postgres"}},
		{"dsn with badger", `{storage: {dsn: "postgres://127.0.0.1/db"}, sources: [{name: a, request_id: "json:id"}]}`, []string{"storage.dsn: is set, but storage.backend is badger"}},
		{"negative pool", `{storage: {backend: postgres, dsn: "postgres://127.0.0.1/db", pool_size: -1}, sources: [{name: a, request_id: "json:id"}]}`, []string{"storage.pool_size: must be at least 0"}},
		{"min_free with postgres", `{storage: {backend: postgres, dsn: "postgres://127.0.0.1/db", min_free: 1000}, sources: [{name: a, request_id: "json:id"}]}`, []string{"storage.min_free: is the reserve kept in Badger's data_dir"}},
		{"every problem at once", `{max_body: 0, sources: [{name: a}]}`, []string{"max_body: must be greater than 0", "sources[0].request_id: is required"}},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.yaml))
		if err == nil {
			t.Errorf("%s: Parse succeeded", tt.name)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tt.name, err, w)
			}
		}
	}
}

// Receipts must outlast the window in which a signed timestamp passes;
// schemes that sign none set no such window.
func TestReceiptsOutliveTheReplayWindow(t *testing.T) {
	for _, yaml := range []string{
		`{receipt_ttl: 11m, sources: [{name: a, verify: {scheme: stripe, secrets: [s]}}]}`,
		`{receipt_ttl: 3m, sources: [{name: a, verify: {scheme: slack, secrets: [s], tolerance: 1m}}]}`,
		`{receipt_ttl: 1s, sources: [{name: a, verify: {scheme: github, secrets: [s]}}]}`,
	} {
		if _, err := Parse([]byte(yaml)); err != nil {
			t.Errorf("%s: %v", yaml, err)
		}
	}
}

// A value of the wrong type is named by its line, not quoted: it may be a
// secret expanded from the environment.
func TestTypeErrorsDoNotQuoteValues(t *testing.T) {
	t.Setenv("WEBHOOKD_TEST_SECRET", "whsec-live-0123456789")
	t.Setenv("WEBHOOKD_TEST_TOKEN", "tok-123456")
	for secret, field := range map[string]string{
		"whsec-l":    `verify: { scheme: stripe, secrets: "${WEBHOOKD_TEST_SECRET}" }`,
		"tok-123456": `routes: [{ url: "http://127.0.0.1:9/", headers: "${WEBHOOKD_TEST_TOKEN}" }]`,
	} {
		_, err := Parse([]byte("sources:\n  - name: a\n    request_id: json:id\n    " + field + "\n"))
		if err == nil || !strings.Contains(err.Error(), ": must be a ") || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: err = %v, want the type error without the value", field, err)
		}
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte("sources: []"), 0o600)
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Load error %v does not name %s", err, path)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}

func TestRouteDefaultsAndValidation(t *testing.T) {
	cfg, err := Parse([]byte(`sources: [{name: a, request_id: "json:id", routes: [{url: "http://127.0.0.1:9000/a"}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Sources[0].Routes[0]
	if r.Name != DefaultRoute || r.Filter != "" || r.Match != nil || r.Timeout != 10*time.Second || r.Concurrency != 8 || r.MaxAttempts != 12 ||
		r.Backoff.Initial != time.Second || r.Backoff.Max != 10*time.Minute || r.Supersede {
		t.Errorf("route defaults = %+v", r)
	}
	for yaml, want := range map[string]string{
		`{url: "ftp://x"}`: "sources[0].routes[0].url: must be an http or https URL",
		`{url: "http://x", backoff: {initial: 5s, max: 1s}}`:        "sources[0].routes[0].backoff.max: must not be less than backoff.initial",
		`{url: "http://x", concurrency: 5000}`:                      "sources[0].routes[0].concurrency: must be at most 1024",
		`{url: "http://x", headers: {"Bad Header": "v"}}`:           "sources[0].routes[0].headers[Bad Header]: must be an HTTP header name",
		`{url: "http://x", pass_headers: ["X-Ok", "no good"]}`:      "sources[0].routes[0].pass_headers[1]: must be an HTTP header name",
		`{url: "http://x", max_attempts: 1000, backoff: {max: 1h}}`: "sources[0].routes[0].max_attempts: retries may take up to 1001h46m40s",
		`{name: "Billing", url: "http://x"}`:                        "sources[0].routes[0].name: must be 1-64 lowercase letters",
	} {
		_, err := Parse([]byte(`sources: [{name: a, request_id: "json:id", routes: [` + yaml + `]}]`))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("route %s: error %v, want %q", yaml, err, want)
		}
	}
}

// Each route's filter is compiled when the configuration is parsed, and
// each route named, uniquely in its source; a source without routes
// forwards nothing.
func TestRoutes(t *testing.T) {
	cfg, err := Parse([]byte(`sources:
  - name: pay
    request_id: json:id
    routes:
      - { name: billing, url: "http://127.0.0.1:9000/billing", filter: 'body.type.startsWith("invoice.")' }
      - { name: analytics, url: "http://127.0.0.1:9000/analytics" }
      - name: audit
        url: http://127.0.0.1:9000/audit
        filter: |
          has(body.account)
            && body.account == "acct_1"
  - name: quiet
    request_id: json:id
`))
	if err != nil {
		t.Fatal(err)
	}
	routes := cfg.Sources[0].Routes
	var names []string
	for _, r := range routes {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"billing", "analytics", "audit"}) {
		t.Fatalf("routes %q, want billing, analytics, audit in order", names)
	}
	if routes[0].Match == nil || routes[1].Match != nil || routes[2].Match == nil {
		t.Fatalf("matches %v, %v, %v: want the two filters compiled and none for analytics", routes[0].Match, routes[1].Match, routes[2].Match)
	}
	invoice := &filter.Input{Body: []byte(`{"type": "invoice.paid", "account": "acct_1"}`)}
	charge := &filter.Input{Body: []byte(`{"type": "charge.succeeded"}`)}
	matches := func(f *filter.Filter, in *filter.Input) bool {
		ok, _ := f.Match(in)
		return ok
	}
	if !matches(routes[0].Match, invoice) || matches(routes[0].Match, charge) || !matches(routes[2].Match, invoice) || matches(routes[2].Match, charge) {
		t.Error("a compiled filter selects other deliveries than its expression says")
	}
	if len(cfg.Sources[1].Routes) != 0 {
		t.Errorf("a source without routes has %d", len(cfg.Sources[1].Routes))
	}
}

// A filter that does not compile is a problem like any other, with its
// line and its position in the expression, listed with the rest.
func TestRouteProblems(t *testing.T) {
	got := problems(t, `receipt_ttl: 1 week
sources:
  - name: pay
    request_id: json:id
    routes:
      - name: billing
        url: http://x
        filter: body.type.startsWith("invoice.") && bdoy.account == "a"
      - name: billing
        url: http://y
        filter: 'body.type.startsWith("invoice."'
      - url: http://z
      - name: audit
        url: http://w
        filter: request_id > 5
  - name: gh
    request_id: json:id
    routes:
      - url: ftp://x
        filter: 'headers["x-github-event"] == "push"'
`)
	want := []string{
		`line 1: receipt_ttl: "1 week" is not a duration (e.g. 90s, 15m or 168h)`,
		"line 8: sources[0].routes[0].filter: undeclared reference to 'bdoy' at 1:37",
		`line 9: sources[0].routes[1].name: "billing" is the name of routes[0] too: a route's name is unique in its source`,
		"line 11: sources[0].routes[1].filter: Syntax error: missing ')' at '<EOF>' at 1:32",
		"line 12: sources[0].routes[2].name: is required when a source has more than one route",
		"line 15: sources[0].routes[3].filter: found no matching overload for '_>_' applied to '(string, int)' at 1:12",
		"line 19: sources[1].routes[0].url: must be an http or https URL (got ftp://x)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%q\nwant:\n%q", got, want)
	}
}

func TestVerifyPresetsAndValidation(t *testing.T) {
	cfg, err := Parse([]byte(`sources: [{name: gh, verify: {scheme: github, secrets: ["s1", "s0"]}}, {name: shop, verify: {scheme: shopify, secrets: ["s"]}, request_id: "json:id"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Sources[0].RequestID; got != "header:X-GitHub-Delivery" {
		t.Errorf("github preset request_id = %q", got)
	}
	if s := cfg.Sources[1]; s.RequestID != "json:id" || s.DeliveryID != "header:X-Shopify-Webhook-Id|header:Shopify-Webhook-Id" {
		t.Errorf("explicit selector must win over the preset, the rest comes from it: %+v", s)
	}
	for yaml, want := range map[string]string{
		`{name: a, verify: {scheme: stripe, secrets: [""]}}`:                                         "sources[0].verify.secrets: at least one non-empty secret",
		`{name: a, verify: {scheme: standard-webhooks, secrets: ["plain"]}}`:                         "sources[0].verify.secrets[0]:",
		`{name: a, verify: {scheme: rot13}}`:                                                         "sources[0].verify.scheme: must be one of",
		`{name: a, request_id: "json:id", routes: [{url: "http://x", sign: {secret: "not-whsec"}}]}`: "sources[0].routes[0].sign.secret:",
	} {
		_, err := Parse([]byte("sources: [" + yaml + "]"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", yaml, err, want)
		}
	}
}

func TestSelectorAlternatives(t *testing.T) {
	for _, spec := range []string{
		"header:webhook-id|header:svix-id",
		"json:data.id|header:X-Event-Id|json:id",
		"header:X-Shopify-Event-Id|header:Shopify-Event-Id|header:Shopify-Webhook-Id",
	} {
		cfg, err := Parse([]byte(`sources: [{name: a, request_id: "` + spec + `", resource: "` + spec + `"}]`))
		if err != nil {
			t.Errorf("%s: %v", spec, err)
			continue
		}
		if got := cfg.Sources[0].RequestID; got != spec {
			t.Errorf("request_id = %q, want %q as written", got, spec)
		}
	}
}

// A source's max_body is its own, else its provider's preset, else the
// global one; the HTTP server reads up to the largest.
func TestSourceMaxBody(t *testing.T) {
	cfg, err := Parse([]byte(`max_body: 2048
sources:
  - { name: gh, verify: { scheme: github, secrets: [s] } }
  - { name: pay, verify: { scheme: stripe, secrets: [s] } }
  - { name: plain, request_id: json:id }
  - { name: mac, request_id: json:id, verify: { scheme: hmac-sha256, secrets: [s], header: X-Sig } }
  - { name: own, max_body: 4096, verify: { scheme: github, secrets: [s] } }
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"gh": 25 << 20, "pay": 10 << 20, "plain": 2048, "mac": 2048, "own": 4096}
	for _, s := range cfg.Sources {
		if s.MaxBody != want[s.Name] {
			t.Errorf("%s: max_body %d, want %d", s.Name, s.MaxBody, want[s.Name])
		}
	}
	if got := cfg.LargestBody(); got != 25<<20 {
		t.Errorf("LargestBody = %d, want %d", got, 25<<20)
	}
}

// A route's rate reads per second or per minute, its burst defaults to a
// tenth of a second's worth (at least one), and its breaker to the
// defaults for an internal service; off turns it off.
func TestRouteRateAndBreaker(t *testing.T) {
	cfg, err := Parse([]byte(`sources:
  - name: a
    request_id: json:id
    routes:
      - { name: plain, url: "http://x" }
      - { name: fast, url: "http://x", rate: 200/s }
      - { name: slow, url: "http://x", rate: 50/m }
      - { name: burst, url: "http://x", rate: 5/s, burst: 30 }
      - { name: odd, url: "http://x", rate: 15/s }
      - { name: tuned, url: "http://x", breaker: { failures: 3, cooldown: 1s } }
      - { name: patient, url: "http://x", breaker: { cooldown: 20m } }
      - { name: off, url: "http://x", max_attempts: 1, breaker: { off: true } }
`))
	if err != nil {
		t.Fatal(err)
	}
	defaults := forward.Breaker{Failures: 5, Cooldown: 10 * time.Second, MaxCooldown: 5 * time.Minute}
	want := map[string]struct {
		rate    forward.Rate
		breaker forward.Breaker
	}{
		"plain":   {forward.Rate{}, defaults},
		"fast":    {forward.Rate{Limit: 200, Burst: 20}, defaults},
		"slow":    {forward.Rate{Limit: 50.0 / 60, Burst: 1}, defaults},
		"burst":   {forward.Rate{Limit: 5, Burst: 30}, defaults},
		"odd":     {forward.Rate{Limit: 15, Burst: 2}, defaults},
		"tuned":   {forward.Rate{}, forward.Breaker{Failures: 3, Cooldown: time.Second, MaxCooldown: 5 * time.Minute}},
		"patient": {forward.Rate{}, forward.Breaker{Failures: 5, Cooldown: 20 * time.Minute, MaxCooldown: 20 * time.Minute}},
		"off":     {forward.Rate{}, forward.Breaker{}},
	}
	for _, r := range cfg.Sources[0].Routes {
		w := want[r.Name]
		if got := r.ForwardRate(); got != w.rate {
			t.Errorf("%s: rate %+v, want %+v", r.Name, got, w.rate)
		}
		if got := r.ForwardBreaker(); got != w.breaker {
			t.Errorf("%s: breaker %+v, want %+v", r.Name, got, w.breaker)
		}
	}
	if b := cfg.Sources[0].Routes[7].Breaker; b.Failures != 0 || b.Cooldown != 0 {
		t.Errorf("a breaker that is off was given defaults: %+v", b)
	}
}

func TestRouteRateAndBreakerProblems(t *testing.T) {
	for yaml, want := range map[string]string{
		`{url: "http://x", rate: 200}`:                                  "sources[0].routes[0].rate: must be requests per second or per minute, e.g. 200/s or 50/m (got 200)",
		`{url: "http://x", rate: 200/h}`:                                "sources[0].routes[0].rate: must be requests per second or per minute",
		`{url: "http://x", rate: 1.5/s}`:                                "sources[0].routes[0].rate: must be requests per second or per minute",
		`{url: "http://x", rate: 0/s}`:                                  "sources[0].routes[0].rate: must be 1 to 1000000 requests per second or per minute (got 0/s)",
		`{url: "http://x", rate: 99999999999/s}`:                        "sources[0].routes[0].rate: must be 1 to 1000000",
		`{url: "http://x", burst: 10}`:                                  "sources[0].routes[0].burst: set without rate",
		`{url: "http://x", rate: 5/s, burst: -1}`:                       "sources[0].routes[0].burst: must be at least 0 (got -1)",
		`{url: "http://x", breaker: {failures: -1}}`:                    "sources[0].routes[0].breaker.failures: must be at least 1 (got -1); breaker.off: true turns the breaker off",
		`{url: "http://x", breaker: {cooldown: -1s}}`:                   "sources[0].routes[0].breaker.cooldown: must be greater than 0 (got -1s)",
		`{url: "http://x", breaker: {cooldown: 1m, max_cooldown: 30s}}`: "sources[0].routes[0].breaker.max_cooldown: must not be less than breaker.cooldown (got 30s, cooldown 1m0s)",
		`{url: "http://x", breaker: {off: true, failures: 3}}`:          "sources[0].routes[0].breaker.off: is true, yet breaker.failures, cooldown or max_cooldown is set",
		`{url: "http://x", max_attempts: 4}`:                            "sources[0].routes[0].max_attempts: is 4, under breaker.failures 5: an entry alone in the route would be dead-lettered before the breaker opens",
		`{url: "http://x", max_attempts: 2, breaker: {failures: 3}}`:    "sources[0].routes[0].max_attempts: is 2, under breaker.failures 3",
		`{url: "http://x", breaker: on}`:                                "sources[0].routes[0].breaker: must be a section of fields, not a single value",
	} {
		_, err := Parse([]byte(`sources: [{name: a, request_id: "json:id", routes: [` + yaml + `]}]`))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("route %s: error %v, want %q", yaml, err, want)
		}
	}
	// max_attempts equal to the run that opens the breaker is enough: the
	// last failure before it is the opening one, which does not count.
	for _, yaml := range []string{
		`{url: "http://x", max_attempts: 5}`,
		`{url: "http://x", max_attempts: 1, breaker: {failures: 1}}`,
		`{url: "http://x", max_attempts: 1, breaker: {off: true}}`,
	} {
		if _, err := Parse([]byte(`sources: [{name: a, request_id: "json:id", routes: [` + yaml + `]}]`)); err != nil {
			t.Errorf("route %s: %v", yaml, err)
		}
	}
}
