package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/webhookd/webhookd/configs"
)

// checkedConfig sets secrets in every place Masked covers, reads one from
// the environment and leaves durations to their defaults.
const checkedConfig = `
admin: { token: "${WEBHOOKD_TEST_CHECK_TOKEN}" }
sources:
  - name: gh
    verify: { scheme: github, secrets: ["gh-verify-secret-1", "gh-verify-secret-0"] }
    routes:
      - name: ci
        filter: 'headers["x-github-event"] == "push" && body.ref == "refs/heads/main"'
        url: http://sink:9000/gh
        headers: { Authorization: "Bearer downstream-credential" }
        sign: { secret: "whsec_c2lnbmluZy1zZWNyZXQtZm9yLXRlc3Rz" }
      - name: archive
        url: http://archive:archive-password-4d2c@sink:9000/archive
  - name: audit
    request_id: header:Idempotency-Key
  - name: pay
    verify: { scheme: stripe, secrets: ["stripe-verify-secret"] }
`

var checkedSecrets = []string{"admin-token-from-env", "gh-verify-secret-1", "gh-verify-secret-0", "downstream-credential", "c2lnbmluZy1zZWNyZXQ", "archive-password-4d2c", "stripe-verify-secret"}

// invalidConfig breaks three rules, misspells a field, holds a value
// that is not a duration and a filter that does not compile.
const invalidConfig = `
listen: nope
receipt_ttl: 1 week
sources:
  - name: Bad Name
    request_id: x
    delivery_idd: header:X-Id
    routes:
      - url: http://127.0.0.1:9000/x
        filter: body.type.startsWith("invoice.") && bdoy.id == "1"
`

var invalidProblems = []string{
	"line 2: listen: must be host:port",
	`line 3: receipt_ttl: "1 week" is not a duration (e.g. 90s, 15m or 168h)`,
	"line 5: sources[0].name: must be 1-64 lowercase letters",
	"line 6: sources[0].request_id: must be json:<dotted.path> or header:<Name>",
	"line 7: sources[0].delivery_idd: unknown field (did you mean delivery_id?)",
	"line 10: sources[0].routes[0].filter: undeclared reference to 'bdoy' at 1:37",
}

// goWords are what a message naming Go's types rather than the file's would hold.
var goWords = []string{"time.Duration", "configs.", "unmarshal", "!!str", "[]string"}

func configCheckFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// execRoot runs webhookd in-process with args, through the root command
// so that the subcommand's registration is covered too.
func execRoot(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), errOut.String(), err
}

func TestConfigCheckPrintsTheEffectiveConfigurationMasked(t *testing.T) {
	t.Setenv("WEBHOOKD_TEST_CHECK_TOKEN", "admin-token-from-env")
	path := configCheckFile(t, "webhookd.yaml", checkedConfig)
	stdout, stderr, err := execRoot(t, "config", "check", "--config", path)
	if err != nil {
		t.Fatalf("config check: %v\n%s", err, stderr)
	}
	for _, secret := range checkedSecrets {
		if strings.Contains(stdout, secret) {
			t.Errorf("output shows the secret %q:\n%s", secret, stdout)
		}
	}
	// Defaults are applied and durations read as durations, not nanoseconds.
	for _, want := range []string{
		"receipt_ttl: 168h0m0s\n",
		"shutdown_timeout: 10s\n",
		"  token: '****'\n",
		"request_id: header:X-GitHub-Delivery\n", // the github preset
		"  - name: gh\n",
		"      - name: ci\n        filter: headers[\"x-github-event\"] == \"push\" && body.ref == \"refs/heads/main\"\n",
		"      - name: archive\n        filter: \"\" # every accepted delivery\n        url: http://archive:****@sink:9000/archive\n",
		"    routes: [] # decisions are recorded, nothing is forwarded\n",
		"        timeout: 10s\n",
		"          max: 10m0s\n",
		"          Authorization: '****'\n",
		"      stale: 200\n", // every decision's status
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	// Only what applies: a tolerance for stripe, which signs a timestamp,
	// and none for github; no version format where there is no version.
	if n := strings.Count(stdout, "      tolerance: 5m0s\n"); n != 1 {
		t.Errorf("output shows the 5m tolerance %d times, want once (stripe):\n%s", n, stdout)
	}
	if strings.Contains(stdout, "version_format") {
		t.Errorf("output shows a version_format for sources without a version:\n%s", stdout)
	}
	// Only Badger's storage fields: PostgreSQL's are not printed, not even empty.
	for _, postgresOnly := range []string{"dsn", "pool_size", "statement_timeout"} {
		if strings.Contains(stdout, postgresOnly) {
			t.Errorf("output has %s, which badger does not use:\n%s", postgresOnly, stdout)
		}
	}

	// The output is a configuration file: every key is a known field and
	// every value reads back as what was printed.
	want, err := configs.Parse([]byte(strings.ReplaceAll(checkedConfig, "${WEBHOOKD_TEST_CHECK_TOKEN}", "admin-token-from-env")))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(stdout))
	dec.KnownFields(true)
	var back configs.Config
	if err := dec.Decode(&back); err != nil {
		t.Fatalf("output does not read back as a configuration: %v\n%s", err, stdout)
	}
	if back.ReceiptTTL != 168*time.Hour || back.Sources[0].Routes[1].Backoff.Max != 10*time.Minute || back.Sources[0].Routes[0].Filter != want.Sources[0].Routes[0].Filter || back.Sources[0].Verify.Secrets[1] != configs.MaskedSecret {
		t.Errorf("read back %+v", back)
	}
	var again, masked bytes.Buffer
	if err := writeConfig(&again, &back); err != nil {
		t.Fatal(err)
	}
	if err := writeConfig(&masked, want.Masked()); err != nil {
		t.Fatal(err)
	}
	if again.String() != masked.String() {
		t.Errorf("output read back prints differently:\n%s\nwant:\n%s", again.String(), masked.String())
	}
}

func TestConfigCheckFallsBackToTheEmbeddedExample(t *testing.T) {
	t.Chdir(t.TempDir()) // no configs/webhookd.yaml here
	stdout, stderr, err := execRoot(t, "config", "check")
	if err != nil {
		t.Fatalf("config check: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "- name: demo\n") || !strings.Contains(stdout, "data_dir: ./data\n") {
		t.Errorf("output is not the example configuration:\n%s", stdout)
	}

	// An explicit --config that is missing is an error, not the example.
	if _, _, err := execRoot(t, "config", "check", "--config", filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("a missing --config file passed the check")
	}
}

func TestConfigCheckListsEveryProblem(t *testing.T) {
	path := configCheckFile(t, "bad.yaml", invalidConfig)
	stdout, stderr, err := execRoot(t, "config", "check", "--config", path)
	var verr *configs.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error = %v, want a *configs.ValidationError", err)
	}
	if len(verr.Problems) != len(invalidProblems) {
		t.Errorf("problems = %q, want %d", verr.Problems, len(invalidProblems))
	}
	for _, p := range invalidProblems {
		if !strings.Contains(stderr, p) {
			t.Errorf("stderr lacks %q:\n%s", p, stderr)
		}
	}
	for _, w := range goWords {
		if strings.Contains(stderr, w) {
			t.Errorf("stderr names Go's %q:\n%s", w, stderr)
		}
	}
	if stdout != "" {
		t.Errorf("an invalid configuration printed to stdout:\n%s", stdout)
	}
}

// TestConfigCheckExitCodes runs the real binary: scripts and CI gate on the
// exit status, which main, not the command, decides.
func TestConfigCheckExitCodes(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (code int, stdout, stderr string) {
		var out, errOut bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
	}

	if code, stdout, stderr := run("config", "check", "--config", configCheckFile(t, "good.yaml", checkedConfig)); code != 0 || !strings.Contains(stdout, "- name: gh\n") {
		t.Errorf("valid configuration: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	bad := configCheckFile(t, "bad.yaml", invalidConfig)
	code, stdout, stderr := run("config", "check", "--config", bad)
	if code != 1 || stdout != "" {
		t.Errorf("invalid configuration: exit %d, stdout %q; want exit 1 and nothing on stdout", code, stdout)
	}
	for _, p := range invalidProblems {
		if !strings.Contains(stderr, p) {
			t.Errorf("stderr lacks %q:\n%s", p, stderr)
		}
	}
	// serve refuses the file with the same words.
	if code, _, serveErr := run("serve", "--config", bad); code != 1 || serveErr != stderr {
		t.Errorf("serve on an invalid configuration: exit %d, stderr:\n%s\nwant exit 1 and config check's:\n%s", code, serveErr, stderr)
	}
}

// The reserve that serve derives is not in the file, so the output says
// where to read it; a configured one is printed as it is.
func TestConfigCheckSaysWhereTheDerivedReserveIs(t *testing.T) {
	for _, tc := range []struct{ config, want string }{
		{checkedConfig, "\n  min_free: 0 # derived when serve starts, which logs it (reserve_bytes)\n"},
		{checkedConfig + "storage: { min_free: 1073741824 }\n", "\n  min_free: 1073741824\n"},
	} {
		stdout, stderr, err := execRoot(t, "config", "check", "--config", configCheckFile(t, "webhookd.yaml", tc.config))
		if err != nil {
			t.Fatalf("config check: %v\n%s", err, stderr)
		}
		if !strings.Contains(stdout, tc.want) {
			t.Errorf("output lacks %q:\n%s", tc.want, stdout)
		}
	}
}

// The storage backend, not the configuration package, knows how large a
// body it can store.
func TestBodyTooLargeForTheBackendIsAConfigError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "webhookd.yaml")
	if err := os.WriteFile(path, []byte("max_body: 67108864\nsources: [{name: a, request_id: \"json:id\"}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadConfig(path, true)
	if err == nil || !strings.Contains(err.Error(), "max_body: must be at most 33554432 with storage.backend badger (got 67108864)") ||
		strings.Contains(err.Error(), "sources[0].max_body") {
		t.Errorf("loadConfig: %v; want the global max_body named, and not the source that takes it", err)
	}
	if err := os.WriteFile(path, []byte("sources: [{name: a, request_id: \"json:id\", max_body: 33554433}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = loadConfig(path, true)
	if err == nil || !strings.Contains(err.Error(), "sources[0].max_body: must be at most 33554432 with storage.backend badger (got 33554433)") {
		t.Errorf("loadConfig: %v", err)
	}
}

// config check validates the postgres section and prints its DSN without
// the password.
func TestConfigCheckPostgres(t *testing.T) {
	t.Setenv("WEBHOOKD_TEST_DSN", "postgres://webhookd:dsn-password-3c1f@db:5432/webhookd")
	path := configCheckFile(t, "webhookd.yaml", `
storage: { backend: postgres, dsn: "${WEBHOOKD_TEST_DSN}", statement_timeout: 2s }
sources: [{name: a, request_id: "json:id"}]
`)
	stdout, stderr, err := execRoot(t, "config", "check", "--config", path)
	if err != nil {
		t.Fatalf("config check: %v\n%s", err, stderr)
	}
	if strings.Contains(stdout, "dsn-password-3c1f") {
		t.Errorf("output shows the DSN's password:\n%s", stdout)
	}
	for _, want := range []string{"  backend: postgres\n", "  dsn: postgres://webhookd:****@db:5432/webhookd\n", "  pool_size: 8\n", "  statement_timeout: 2s\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "derived when serve starts") {
		t.Errorf("output says a Badger reserve is derived:\n%s", stdout)
	}
	// Only PostgreSQL's fields: Badger's are not printed, not even empty.
	for _, badgerOnly := range []string{"data_dir", "min_free"} {
		if strings.Contains(stdout, badgerOnly) {
			t.Errorf("output has %s, which postgres does not use:\n%s", badgerOnly, stdout)
		}
	}
	if back, err := configs.Parse([]byte(stdout)); err != nil || back.Storage.StatementTimeout != 2*time.Second || back.DataDir != "" {
		t.Errorf("output does not read back as the configuration it shows: %v", err)
	}

	for _, tt := range []struct{ storage, want string }{
		{`{ backend: postgres, dsn: "postgres://webhookd:dsn-password-3c1f@db:99999/webhookd" }`, "storage.dsn: not a usable PostgreSQL connection string: invalid port"},
		{`{ backend: postgres, dsn: "postgres://webhookd:dsn-password-3c1f@db/webhookd" }, data_dir: ./data`, "data_dir: is set, but storage.backend postgres"},
	} {
		bad := configCheckFile(t, "webhookd.yaml", "{storage: "+tt.storage+", sources: [{name: a, request_id: \"json:id\"}]}")
		_, stderr, err = execRoot(t, "config", "check", "--config", bad)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("config check with storage %s: %v, want %q", tt.storage, err, tt.want)
		} else if strings.Contains(err.Error()+stderr, "dsn-password-3c1f") {
			t.Errorf("the error shows the DSN's password: %v", err)
		}
	}
}

// serve on a database that does not answer fails at once with an error
// naming storage.dsn, not a stack trace.
func TestServeOnAnUnreachableDatabase(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	path := configCheckFile(t, "webhookd.yaml", `
listen: "127.0.0.1:0"
admin: { listen: "127.0.0.1:0" }
storage: { backend: postgres, dsn: "postgres://webhookd:dsn-password-3c1f@127.0.0.1:1/webhookd?connect_timeout=2" }
sources: [{name: a, request_id: "json:id"}]
`)
	out, err := exec.Command(bin, "serve", "--config", path).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "storage.dsn: cannot connect to PostgreSQL at 127.0.0.1:1/webhookd") {
		t.Errorf("output does not name storage.dsn and the database:\n%s", out)
	}
	if strings.Contains(string(out), "goroutine ") || strings.Contains(string(out), "dsn-password-3c1f") {
		t.Errorf("output has a stack trace or the password:\n%s", out)
	}
}
