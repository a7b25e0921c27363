package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/webhookd/webhookd/signature"
	"github.com/webhookd/webhookd/versioning"
)

// problems parses yaml and returns every problem it lists, as printed.
func problems(t *testing.T, yaml string) []string {
	t.Helper()
	_, err := Parse([]byte(yaml))
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Parse(%q) = %v, want a *ValidationError", yaml, err)
	}
	var got []string
	for _, p := range verr.Problems {
		got = append(got, p.String())
	}
	return got
}

// A problem of the file's shape does not stop the check: the rules run on
// what could be read, and every problem is listed in file order.
func TestParseListsShapeAndRuleProblemsTogether(t *testing.T) {
	got := problems(t, `listen: ":8080"
receipt_ttl: 1 week
sources:
  - name: billing
    request_idd: json:id
    resource: body:id
`)
	want := []string{
		`line 2: receipt_ttl: "1 week" is not a duration (e.g. 90s, 15m or 168h)`,
		"line 5: sources[0].request_idd: unknown field (did you mean request_id?)",
		"line 6: sources[0].resource: must be json:<dotted.path> or header:<Name> (got body:id)",
	}
	// "request_id: is required" is left out: the misspelling explains it.
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%q\nwant:\n%q", got, want)
	}
}

func TestParseNamesShapeProblems(t *testing.T) {
	const src = "sources:\n  - name: a\n    request_id: json:id\n"
	tests := []struct{ name, yaml, want string }{
		{"number", "max_body: lots\n" + src, `line 1: max_body: "lots" is not a whole number in range`},
		{"quoted number", "max_body: \"2048\"\n" + src, `line 1: max_body: "2048" is text, not a number (quoted values and ${NAME} values are text)`},
		{"number out of range", "max_body: 99999999999999999999\n" + src, `line 1: max_body: "99999999999999999999" is not a whole number in range`},
		{"integer duration", "receipt_ttl: 60\n" + src, `line 1: receipt_ttl: "60" is not a duration (e.g. 90s, 15m or 168h)`},
		{"bool", src + "    routes: [{url: \"http://x\", supersede: sometimes}]\n", `line 4: sources[0].routes[0].supersede: "sometimes" is not true or false`},
		{"section expected", "log: debug\n" + src, "line 1: log: must be a section of fields, not a single value"},
		{"list expected", "sources: {name: a}\n", "line 1: sources: must be a list, not a section"},
		{"single value expected", "listen: [a, b]\n" + src, "line 1: listen: must be a single value, not a list"},
		{"nested unknown field", src + "    routes:\n      - url: http://x\n        backoff: {intial: 1s}\n", "line 6: sources[0].routes[0].backoff.intial: unknown field (did you mean initial?)"},
		{"routes as a section", src + "    routes:\n      url: http://x\n", "line 5: sources[0].routes: must be a list, not a section"},
		{"unknown field, nothing near", "colour: blue\n" + src, "line 1: colour: unknown field (known: admin, data_dir, listen, log, max_body, receipt_ttl, record, shutdown_timeout, sources, storage, tls, tracing)"},
		{"anchor that holds itself", "sources: [&a {<<: *a, name: a, request_id: json:id}]\n", "line 1: sources[0]: *a refers to the section that holds it"},
		{"set twice", "listen: \":1\"\nlisten: \":2\"\n" + src, "line 2: listen: set twice (also on line 1)"},
		{"map value", src + "    responses: {stale: often}\n", `line 4: sources[0].responses[stale]: "often" is not a whole number in range`},
		{"syntax", "sources:\n\t- name: a\n", "line 2: not YAML: found character that cannot start any token"},
		{"rule on a missing field names its section's line", "listen: \":1\"\nsources:\n  - name: a\n", "line 3: sources[0].request_id: is required"},
		{"rule without a line", "listen: \":1\"\n", "sources: is required"},
	}
	for _, tt := range tests {
		got := problems(t, tt.yaml)
		if !slices.Contains(got, tt.want) {
			t.Errorf("%s: problems %q, want %q", tt.name, got, tt.want)
		}
		if len(got) != 1 {
			t.Errorf("%s: %d problems %q, want only %q", tt.name, len(got), got, tt.want)
		}
	}
}

// Anchors, aliases and merge keys are YAML, not unknown fields.
func TestParseFollowsAliasesAndMerges(t *testing.T) {
	cfg, err := Parse([]byte(`
sources:
  - &a
    name: a
    request_id: json:id
    routes: [{ <<: [{timeout: 3s}, {max_attempts: 7}], url: "http://x" }]
  - <<: *a
    name: b
`))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Sources[1].Routes; cfg.Sources[1].Name != "b" || len(r) != 1 || r[0].Timeout != 3*time.Second || r[0].MaxAttempts != 7 {
		t.Errorf("merged source = %+v", cfg.Sources[1])
	}
}

// A field left empty by an unset ${NAME} is named with the variable, in
// place of the rule it then breaks; one that is set reads as usual.
func TestParseNamesUnsetVariables(t *testing.T) {
	os.Unsetenv("WEBHOOKD_TEST_UNSET")
	os.Unsetenv("STRIPE_WEBHOOK_SECRET")
	t.Setenv("WEBHOOKD_TEST_EMPTY", "")
	got := problems(t, `data_dir: ${WEBHOOKD_TEST_UNSET}
sources:
  - name: pay
    verify:
      scheme: stripe
      secrets: ["${STRIPE_WEBHOOK_SECRET}"]
  - name: gh
    request_id: json:id
    verify: { scheme: github, secrets: ["${WEBHOOKD_TEST_EMPTY}"] }
    routes: [{ url: "http://x", sign: { secret: "${WEBHOOKD_TEST_UNSET}" } }]
`)
	want := []string{
		"line 1: data_dir: empty — is WEBHOOKD_TEST_UNSET set?",
		"line 6: sources[0].verify.secrets[0]: empty — is STRIPE_WEBHOOK_SECRET set?",
		`line 9: sources[1].verify.secrets: at least one non-empty secret is required for scheme "github"`,
		"line 10: sources[1].routes[0].sign.secret: empty — is WEBHOOKD_TEST_UNSET set?",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%q\nwant:\n%q", got, want)
	}
}

// The parsed configuration holds what is in effect: a tolerance only where
// a scheme signs a timestamp, a version format only where there is a
// version, hmac-sha256's encoding.
func TestParseFillsTheDefaultsInEffect(t *testing.T) {
	cfg, err := Parse([]byte(`sources:
  - { name: pay, verify: { scheme: stripe, secrets: [s] } }
  - { name: gh, verify: { scheme: github, secrets: [s] } }
  - { name: h, request_id: json:id, resource: json:r, version: json:v, verify: { scheme: hmac-sha256, secrets: [s], header: X-Sig } }
`))
	if err != nil {
		t.Fatal(err)
	}
	pay, gh, h := cfg.Sources[0], cfg.Sources[1], cfg.Sources[2]
	if pay.Verify.Tolerance != signature.DefaultTolerance || gh.Verify.Tolerance != 0 {
		t.Errorf("tolerance: stripe %s, github %s; want %s and none", pay.Verify.Tolerance, gh.Verify.Tolerance, signature.DefaultTolerance)
	}
	if pay.VersionFormat != "" || h.VersionFormat != versioning.Integer {
		t.Errorf("version_format: %q without a version, %q with one", pay.VersionFormat, h.VersionFormat)
	}
	if h.Verify.Encoding != "hex" || pay.Verify.Encoding != "" {
		t.Errorf("encoding: hmac-sha256 %q, stripe %q", h.Verify.Encoding, pay.Verify.Encoding)
	}
	if pay.VersionTies != "" || h.VersionTies != versioning.TiesStale {
		t.Errorf("version_ties: %q without a version, %q with one; want none and stale", pay.VersionTies, h.VersionTies)
	}
}

// FuzzParse checks that the walk names every problem yaml's own decoding
// finds (Parse falls back to yaml's message otherwise), and that a
// configuration it passes also passes yaml's strict decoding.
func FuzzParse(f *testing.F) {
	f.Add([]byte(string(Example())))
	f.Add([]byte("sources: [{name: a, request_id: json:id, responses: {stale: 200, stale: 201}}]"))
	f.Add([]byte("sources: [&a {name: a, request_id: json:id}, {<<: *a, name: b, routes: [{url: 'http://x', timeout: 1s, filter: 'body.type == \"x\"'}]}]"))
	f.Add([]byte("receipt_ttl: 60\nmax_body: '1'\nlog: [x]\nsources: {a: 1}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil && strings.HasPrefix(err.Error(), "parse yaml:") {
			t.Fatalf("yaml found a problem the walk did not name: %v", err)
		}
		if err != nil {
			return
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		strict := New()
		if err := dec.Decode(strict); err != nil && !errors.Is(err, io.EOF) && !strings.Contains(string(data), "${") {
			t.Fatalf("passed Parse (%+v) but not strict decoding: %v", cfg, err)
		}
	})
}

// byteSize reads itself, as a field type added to Config may.
type byteSize int64

func (b *byteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Value != "1GiB" {
		return fmt.Errorf("%q is not a size such as 1GiB", n.Value)
	}
	*b = 1 << 30
	return nil
}

// The walk knows no field by name: a section added to Config is checked by
// its tags, and a type that reads itself gives its own message.
func TestCheckerReadsAnyStructByItsTags(t *testing.T) {
	type storage struct {
		Backend string   `yaml:"backend"`
		MinFree byteSize `yaml:"min_free"`
	}
	type config struct {
		Storage storage `yaml:"storage"`
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("storage:\n  backend: badger\n  min_fre: 1GiB\n  min_free: lots\n"), &doc); err != nil {
		t.Fatal(err)
	}
	c := newChecker(nil)
	c.walk(&doc, reflect.TypeFor[config](), "")
	var got []string
	for _, p := range c.sorted() {
		got = append(got, p.String())
	}
	want := []string{
		"line 3: storage.min_fre: unknown field (did you mean min_free?)",
		`line 4: storage.min_free: "lots" is not a size such as 1GiB`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%q\nwant:\n%q", got, want)
	}
}
