package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/webhookd/webhookd/internal/certs/certstest"
)

func TestHealthCommand(t *testing.T) {
	m, c := startMain(t, testConfig(t, t.TempDir(), "http://127.0.0.1:9/", "127.0.0.1:0", "127.0.0.1:0"))
	probe := func() error {
		cmd := newRootCommand()
		cmd.SetArgs([]string{"health", "--url", "http://" + c.public + "/readyz"})
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		return cmd.Execute()
	}
	if err := probe(); err != nil {
		t.Errorf("health of a running gateway: %v", err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := probe(); err == nil {
		t.Error("health of a stopped gateway succeeded")
	}
}

// webhookd health checks an https listener's certificate against the file
// it is given, a CA or the listener's own certificate, for the URL's host
// or --server-name; without one, against the system's roots.
func TestHealthCommandOverTLS(t *testing.T) {
	ca := certstest.NewCA(t, "health test CA")
	certFile, keyFile := ca.WriteFiles(t, t.TempDir(), "webhookd")
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(t.TempDir(), "other.crt")
	if err := os.WriteFile(otherCA, certstest.NewCA(t, "another CA").PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	probe := func(args ...string) error {
		cmd := newRootCommand()
		cmd.SetArgs(append([]string{"health", "--url", srv.URL + "/readyz"}, args...))
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		return cmd.Execute()
	}
	for _, tc := range []struct {
		name string
		args []string
		ok   bool
	}{
		{"its CA", []string{"--ca-file", caFile}, true},
		{"its own certificate", []string{"--ca-file", certFile}, true},
		{"its CA, named", []string{"--ca-file", caFile, "--server-name", "localhost"}, true},
		{"a name it is not for", []string{"--ca-file", caFile, "--server-name", "hooks.example.com"}, false},
		{"another CA", []string{"--ca-file", otherCA}, false},
		{"the system's roots", nil, false},
	} {
		if err := probe(tc.args...); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	if err := probe("--ca-file", filepath.Join(t.TempDir(), "missing.crt")); err == nil || !strings.Contains(err.Error(), "--ca-file") {
		t.Errorf("a missing --ca-file: %v, want an error naming it", err)
	}
}
