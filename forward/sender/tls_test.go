package sender_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
	"github.com/webhookd/webhookd/internal/certs/certstest"
	"github.com/webhookd/webhookd/storage"
)

// writeCA writes ca's certificate as a CA bundle in dir.
func writeCA(t *testing.T, dir string, ca *certstest.CA) string {
	t.Helper()
	path := filepath.Join(dir, "ca.crt")
	certstest.Replace(t, path, ca.PEM())
	return path
}

// A downstream that requires a client certificate, issued by a private
// CA that also issued its own, gets the route's and takes the forward.
func TestMutualTLSWithAPrivateCA(t *testing.T) {
	ca := certstest.NewCA(t, "internal CA")
	down, client := ca.MutualTLSServer(t)
	dir := t.TempDir()
	certFile, keyFile := ca.WriteFiles(t, dir, "webhookd")
	r := route(down.URL)
	r.TLS = &sender.RouteTLS{CAFile: writeCA(t, dir, ca), CertFile: certFile, KeyFile: keyFile}
	s := openStore(t, t.TempDir())
	start(t, s, map[forward.Target]sender.Route{target("billing"): r})
	acceptRaw(t, s, "req-1", "application/json", "{}")
	eventually(t, "delivered", delivered(t, s, "req-1"))
	if got := client.Load(); got != "webhookd" {
		t.Errorf("the downstream was shown client certificate %v, want webhookd", got)
	}
}

// A downstream whose certificate the route does not trust is a failed
// attempt, retried as a transport failure and dead-lettered, whose error
// names the certificate's problem; so is a client certificate the
// downstream refuses.
func TestUntrustedCertificateFailsTheAttempt(t *testing.T) {
	ca := certstest.NewCA(t, "internal CA")
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		down func() *httptest.Server
		tls  *sender.RouteTLS
		want string
	}{
		{
			name: "server certificate from another CA",
			down: func() *httptest.Server {
				down := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
				down.Config.ErrorLog = log.New(io.Discard, "", 0)
				down.StartTLS()
				t.Cleanup(down.Close)
				return down
			},
			tls:  &sender.RouteTLS{CAFile: writeCA(t, dir, ca)},
			want: "x509: certificate signed by unknown authority",
		},
		{
			name: "server certificate for another name",
			down: func() *httptest.Server { down, _ := ca.MutualTLSServer(t); return down },
			tls:  &sender.RouteTLS{CAFile: writeCA(t, dir, ca), ServerName: "ledger.internal"},
			want: "x509: certificate is valid for localhost, not ledger.internal",
		},
		{
			name: "no client certificate",
			down: func() *httptest.Server { down, _ := ca.MutualTLSServer(t); return down },
			tls:  &sender.RouteTLS{CAFile: writeCA(t, dir, ca)},
			want: "the downstream refused the TLS connection: remote error: tls: certificate required",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := route(tc.down().URL)
			r.TLS = tc.tls
			s := openStore(t, t.TempDir())
			start(t, s, map[forward.Target]sender.Route{target("billing"): r})
			acceptRaw(t, s, "req-1", "application/json", "{}")
			eventually(t, "dead letter", func() bool { return status(t, s, "billing", "req-1").State == webhookd.ForwardDead })
			dead, _, err := s.DeadLetters(ctx, forward.Target{Source: "billing"}, storage.Page{})
			if err != nil || len(dead) != 1 {
				t.Fatalf("dead letters = %v, %v", dead, err)
			}
			if d := dead[0]; d.Attempts != r.Policy.MaxAttempts || d.LastStatus != 0 || !strings.Contains(d.LastError, tc.want) {
				t.Errorf("dead letter after %d attempts, status %d, error %q; want %d transport failures naming %q",
					d.Attempts, d.LastStatus, d.LastError, r.Policy.MaxAttempts, tc.want)
			}
		})
	}
}

// A CA bundle replaced on disk is trusted from the next connections on:
// an entry failing against the old bundle is delivered once the new one
// is in place, without a restart.
func TestRotatedCABundleIsTrustedWithoutRestart(t *testing.T) {
	oldCA, newCA := certstest.NewCA(t, "old CA"), certstest.NewCA(t, "new CA")
	down, _ := newCA.MutualTLSServer(t)
	dir := t.TempDir()
	certFile, keyFile := newCA.WriteFiles(t, dir, "webhookd")
	r := route(down.URL)
	r.Policy.MaxAttempts = 1000
	r.TLS = &sender.RouteTLS{CAFile: writeCA(t, dir, oldCA), CertFile: certFile, KeyFile: keyFile}
	s := openStore(t, t.TempDir())
	start(t, s, map[forward.Target]sender.Route{target("billing"): r})
	acceptRaw(t, s, "req-1", "application/json", "{}")
	eventually(t, "a failed attempt", func() bool { return status(t, s, "billing", "req-1").Attempts > 0 })
	writeCA(t, dir, newCA)
	eventually(t, "delivered", delivered(t, s, "req-1"))
}

// A route's TLS file that cannot serve stops Open with its field named.
func TestOpenNamesTheRouteTLSFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.crt")
	r := route("https://127.0.0.1:1/")
	r.TLS = &sender.RouteTLS{CAFile: missing}
	f := sender.New(openStore(t, t.TempDir()), map[forward.Target]sender.Route{target("billing"): r}, zaptest.NewLogger(t))
	err := f.Open()
	if err == nil {
		f.Close(ctx)
		t.Fatal("Open succeeded")
	}
	if !strings.Contains(err.Error(), "tls.ca_file: "+missing) {
		t.Errorf("error %q, want it to name tls.ca_file and the file", err)
	}
}
