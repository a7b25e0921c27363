package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/webhookd/webhookd/internal/certs/certstest"
)

// The real binary serves both listeners over TLS, forwards over mutual TLS
// to a downstream trusting a private CA, and serves a rotated certificate
// without a restart.
func TestServeOverTLSEndToEnd(t *testing.T) {
	ca := certstest.NewCA(t, "internal CA")
	dir := t.TempDir()
	serverDir, clientDir := filepath.Join(dir, "server"), filepath.Join(dir, "client")
	for _, d := range []string{serverDir, clientDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	certFile, keyFile := ca.WriteFiles(t, serverDir, "webhookd-a")
	clientCert, clientKey := ca.WriteFiles(t, clientDir, "webhookd-client")
	caFile := filepath.Join(dir, "ca.crt")
	certstest.Replace(t, caFile, ca.PEM())

	down, shown := ca.MutualTLSServer(t)

	public, admin := freeAddr(t), freeAddr(t)
	config := filepath.Join(dir, "webhookd.yaml")
	yaml := fmt.Sprintf(`
listen: %[1]q
tls: { cert_file: %[3]q, key_file: %[4]q }
data_dir: %[5]q
shutdown_timeout: 5s
log: { level: warn }
admin: { listen: %[2]q, token: %[6]q, tls: { cert_file: %[3]q, key_file: %[4]q } }
sources:
  - name: billing
    request_id: json:request_id
    routes:
      - url: %[7]q
        tls: { ca_file: %[8]q, cert_file: %[9]q, key_file: %[10]q }
`, public, admin, certFile, keyFile, filepath.Join(dir, "data"), adminToken, down.URL, caFile, clientCert, clientKey)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	launchBinary(t, config)

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, DisableKeepAlives: true}}
	waitFor(t, "readyz over TLS", func() bool {
		resp, err := client.Get("https://" + public + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	resp, err := client.Post("https://"+public+"/hooks/billing", "application/json", strings.NewReader(`{"request_id":"tls-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delivery over TLS: %d, want 202", resp.StatusCode)
	}
	waitFor(t, "forwarded over mutual TLS", func() bool { return shown.Load() == "webhookd-client" })
	req, _ := http.NewRequest(http.MethodGet, "https://"+admin+"/admin/receipts/billing/tls-1", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("admin API over TLS: %d, want 200", resp.StatusCode)
	}

	ca.WriteFiles(t, serverDir, "webhookd-b")
	waitFor(t, "the rotated certificate served", func() bool { return certstest.ServedName(t, public, ca.Pool()) == "webhookd-b" })
}

// config check names every TLS file that cannot serve, and exits 1.
func TestConfigCheckNamesTLSFiles(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	config := filepath.Join(dir, "webhookd.yaml")
	yaml := fmt.Sprintf(`
tls: { cert_file: %[1]q, key_file: %[1]q }
sources:
  - name: billing
    request_id: json:request_id
    routes:
      - url: https://ledger.internal/hooks
        tls: { ca_file: %[1]q }
`, missing)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "config", "check", "--config", config).CombinedOutput()
	if code := exitCode(err); code != 1 {
		t.Fatalf("config check: exit %d (%v), want 1:\n%s", code, err, out)
	}
	for _, want := range []string{
		"tls.cert_file: " + missing + ": no such file or directory",
		"sources[0].routes[0].tls.ca_file: " + missing + ": no such file or directory",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("config check does not say %q:\n%s", want, out)
		}
	}
}

func exitCode(err error) int {
	if e, ok := err.(*exec.ExitError); ok {
		return e.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
