package configs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/webhookd/webhookd/internal/certs/certstest"
)

// Good TLS files on both listeners and on a route parse into their fields.
func TestTLSFields(t *testing.T) {
	files := writeTLSFiles(t)
	certFile, keyFile, caFile := files.cert, files.key, files.ca
	cfg, err := Parse(fmt.Appendf(nil, `
tls: {cert_file: %[1]s, key_file: %[2]s}
admin: {listen: "127.0.0.1:8081", tls: {cert_file: %[1]s, key_file: %[2]s}}
sources:
  - name: billing
    request_id: header:Idempotency-Key
    routes:
      - url: https://ledger.internal/hooks
        tls: {ca_file: %[3]s, cert_file: %[1]s, key_file: %[2]s, server_name: ledger.svc}
`, certFile, keyFile, caFile))
	if err != nil {
		t.Fatal(err)
	}
	want := TLS{CertFile: certFile, KeyFile: keyFile}
	if cfg.TLS == nil || *cfg.TLS != want || cfg.Admin.TLS == nil || *cfg.Admin.TLS != want {
		t.Errorf("tls = %+v, admin.tls = %+v, want %+v", cfg.TLS, cfg.Admin.TLS, want)
	}
	wantRoute := RouteTLS{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "ledger.svc"}
	if r := cfg.Sources[0].Routes[0].TLS; r == nil || *r != wantRoute {
		t.Errorf("route tls = %+v, want %+v", r, wantRoute)
	}
}

// Every TLS file that cannot serve is a problem of its field, listed with
// the configuration's other problems.
func TestTLSProblemsNameTheField(t *testing.T) {
	ca := certstest.NewCA(t, "test CA")
	dir := t.TempDir()
	certFile, keyFile := ca.WriteFiles(t, dir, "webhookd")
	missing := filepath.Join(dir, "missing.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := problems(t, fmt.Sprintf(`
receipt_ttl: 0s
tls: {cert_file: %[3]s, key_file: %[2]s}
admin: {listen: "127.0.0.1:8081", tls: {cert_file: %[1]s, key_file: %[4]s}}
sources:
  - name: billing
    request_id: header:Idempotency-Key
    routes:
      - name: a
        url: https://ledger.internal/hooks
        tls: {ca_file: %[4]s, cert_file: %[1]s}
      - name: b
        url: http://ledger.internal/hooks
        tls: {server_name: "not a host!"}
      - name: c
        url: https://ledger.internal/hooks
        tls: {}
      - name: d
        url: https://ledger.internal/hooks
        tls: {ca_file: %[3]s}
`, certFile, keyFile, missing, garbage))
	for _, want := range []string{
		"receipt_ttl: ",
		"tls.cert_file: " + missing + ": no such file or directory",
		"admin.tls.key_file: " + garbage + ": ",
		"sources[0].routes[0].tls.key_file: is required with cert_file",
		"sources[0].routes[0].tls.ca_file: " + garbage + ": holds no PEM certificate",
		"sources[0].routes[1].tls: is set, but url is http",
		"sources[0].routes[1].tls.server_name: must be a host name",
		"sources[0].routes[2].tls: is empty",
		"sources[0].routes[3].tls.ca_file: " + missing + ": no such file or directory",
	} {
		if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem reads %q; got:\n%s", want, strings.Join(got, "\n"))
		}
	}
}

type tlsFiles struct{ cert, key, ca string }

// writeTLSFiles writes a CA and a certificate it issued, with its key.
func writeTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	ca := certstest.NewCA(t, "test CA")
	dir := t.TempDir()
	certFile, keyFile := ca.WriteFiles(t, dir, "webhookd")
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return tlsFiles{cert: certFile, key: keyFile, ca: caFile}
}
