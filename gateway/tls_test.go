package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/internal/certs/certstest"
)

// serveTLS opens f's server on loopback with both listeners over TLS, the
// certificate called commonName, issued by ca, in files in dir.
func (f *fixture) serveTLS(t *testing.T, ca *certstest.CA, dir, commonName string) {
	t.Helper()
	certFile, keyFile := ca.WriteFiles(t, dir, commonName)
	files := &configs.TLS{CertFile: certFile, KeyFile: keyFile}
	f.server.publicTLS, f.server.adminTLS = files, files
	f.serve(t)
}

// httpsClient trusts roots alone, and opens a connection per request.
func httpsClient(roots *x509.CertPool) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
}

// Both listeners serve TLS with the configured certificate: a client that
// trusts its CA delivers, gets its decision, and reaches the admin API;
// one that does not is refused.
func TestListenersServeTLS(t *testing.T) {
	ca := certstest.NewCA(t, "test CA")
	f := newFixture(t, nil)
	f.serveTLS(t, ca, t.TempDir(), "webhookd")
	client := httpsClient(ca.Pool())
	body := `{"request_id":"tls-1","data":{"object":{"id":"o1","version":1}}}`
	resp, err := client.Post("https://"+f.server.PublicAddr()+"/hooks/billing", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || resp.TLS == nil {
		t.Errorf("delivery over TLS: %d (tls %v), want 202 over TLS", resp.StatusCode, resp.TLS != nil)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://"+f.server.AdminAddr()+"/admin/receipts/billing/tls-1", nil)
	req.Header.Set("Authorization", "Bearer t0ken")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("admin API over TLS: %d, want 200", resp.StatusCode)
	}
	_, err = httpsClient(certstest.NewCA(t, "other CA").Pool()).Get("https://" + f.server.PublicAddr() + "/healthz")
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("a client that does not trust the CA: %v, want an unknown authority", err)
	}
}

// A certificate replaced on disk, as cert-manager rotates it, is served
// to new connections without a restart.
func TestRotatedCertificateIsServedWithoutRestart(t *testing.T) {
	ca := certstest.NewCA(t, "test CA")
	dir := t.TempDir()
	f := newFixture(t, nil)
	f.serveTLS(t, ca, dir, "cert-a")
	if got := certstest.ServedName(t, f.server.PublicAddr(), ca.Pool()); got != "cert-a" {
		t.Fatalf("serves %q, want cert-a", got)
	}
	ca.WriteFiles(t, dir, "cert-b")
	// The files are looked at again at most once a second.
	deadline := time.Now().Add(10 * time.Second)
	for certstest.ServedName(t, f.server.PublicAddr(), ca.Pool()) != "cert-b" {
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate was not served within 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := certstest.ServedName(t, f.server.AdminAddr(), ca.Pool()); got != "cert-b" {
		t.Errorf("admin listener serves %q, want cert-b", got)
	}
}

// A body over max_body is refused with its 413 over TLS too: the refused
// connection is drained under TLS before it closes. The body, eight times
// a max_body of 16 KiB, is within what a refused connection drains
// (drainBytes) and more than the sockets' buffers take in without it.
func TestOversizedBodyOverTLSGetsIts413(t *testing.T) {
	ca := certstest.NewCA(t, "test CA")
	f := newFixtureFor(t, strings.Replace(testConfig, "max_body: 2048", "max_body: 16384", 1), nil)
	f.serveTLS(t, ca, t.TempDir(), "webhookd")
	client := httpsClient(ca.Pool())
	body := `{"request_id":"big","pad":"` + strings.Repeat("x", 128<<10) + `"}`
	for i := range 5 {
		resp, err := client.Post("https://"+f.server.PublicAddr()+"/hooks/billing", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("try %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("try %d: %d, want 413", i, resp.StatusCode)
		}
	}
}

// A TLS file that cannot serve stops Listen with its field named, and
// leaves no address bound.
func TestListenNamesTheTLSFieldThatCannotServe(t *testing.T) {
	ca := certstest.NewCA(t, "test CA")
	dir := t.TempDir()
	certFile, keyFile := ca.WriteFiles(t, dir, "webhookd")
	missing := dir + "/missing.key"
	for _, tc := range []struct {
		name          string
		public, admin *configs.TLS
		want          string
	}{
		{"public cert", &configs.TLS{CertFile: missing, KeyFile: keyFile}, nil, "tls.cert_file: " + missing},
		{"admin key", nil, &configs.TLS{CertFile: certFile, KeyFile: missing}, "admin.tls.key_file: " + missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := configs.New()
			cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
			cfg.TLS, cfg.Admin.TLS = tc.public, tc.admin
			ls, err := Listen(cfg, zap.NewNop())
			if err == nil {
				ls.Close()
				t.Fatal("Listen succeeded")
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error %q, want it to start %q", err, tc.want)
			}
		})
	}
}
