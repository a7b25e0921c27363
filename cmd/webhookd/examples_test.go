package main

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/internal/certs/certstest"
	"github.com/webhookd/webhookd/signature"
)

var exampleEnvRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// TestProviderExamplesPassConfigCheck runs the built binary's config check
// on every file of configs/examples, with the secrets it names set in the
// environment, as its header comment tells a user to; and without them,
// when the check must fail. There is one file per provider scheme, besides
// those that show a feature.
func TestProviderExamplesPassConfigCheck(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../../configs/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	// A Standard Webhooks secret is also a valid secret of every other scheme.
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("webhookd example test secret"))
	// Variables ending in _FILE name certificate files, which config check
	// reads: a CA's, and a certificate and key it issued.
	ca := certstest.NewCA(t, "webhookd example CA")
	certFile, keyFile := ca.WriteFiles(t, t.TempDir(), "localhost")
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	value := func(name string) string {
		switch {
		case strings.HasSuffix(name, "_CA_FILE"):
			return caFile
		case strings.HasSuffix(name, "_CERT_FILE"):
			return certFile
		case strings.HasSuffix(name, "_KEY_FILE"):
			return keyFile
		}
		return secret
	}
	var schemes []string
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			env := commandEnv("")
			var names []string
			for _, m := range exampleEnvRef.FindAllStringSubmatch(string(raw), -1) {
				names = append(names, m[1])
				env = append(env, m[1]+"="+value(m[1]))
			}
			check := exec.Command(bin, "config", "check", "--config", file)
			check.Env = env
			out, err := check.CombinedOutput()
			if err != nil {
				t.Fatalf("config check: %v\n%s", err, out)
			}
			if strings.Contains(string(out), secret) {
				t.Errorf("config check printed a secret:\n%s", out)
			}

			// Without its secrets the file must not pass: they come from the
			// environment, never from the file.
			check = exec.Command(bin, "config", "check", "--config", file)
			check.Env = commandEnv("")
			if out, err := check.CombinedOutput(); err == nil {
				t.Errorf("config check passed with %v unset:\n%s", names, out)
			}

			for _, name := range names {
				t.Setenv(name, value(name))
			}
			cfg, err := configs.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range cfg.Sources {
				if s.Verify == nil {
					t.Errorf("source %s verifies nothing", s.Name)
					continue
				}
				schemes = append(schemes, s.Verify.Scheme)
				// A file named after a scheme is that scheme's; others
				// (fanout.yaml) show a feature with any.
				if base := strings.TrimSuffix(filepath.Base(file), ".yaml"); slices.Contains(signature.Schemes(), base) && s.Verify.Scheme != base {
					t.Errorf("a %s source is in %s, want %s.yaml", s.Verify.Scheme, filepath.Base(file), s.Verify.Scheme)
				}
			}
		})
	}
	for _, scheme := range signature.Schemes() {
		if scheme != signature.None && !slices.Contains(schemes, scheme) {
			t.Errorf("configs/examples has no configuration for scheme %s", scheme)
		}
	}
}
