package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookd/webhookd/configs"
)

// serveOnce runs the binary's serve on config until it exits, which a
// refused start does at once, and returns its output and exit code.
func serveOnce(t *testing.T, config string) (string, int) {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "webhookd.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "serve", "--config", path).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("serve did not fail: %v\n%s", err, out)
	}
	return string(out), exit.ExitCode()
}

// An address in use stops serve before it creates data_dir, with an error
// naming the field and the address.
func TestServeOnAnAddressInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	inUse := busy.Addr().String()
	for _, tc := range []struct{ field, listen, admin string }{
		{"listen", inUse, freeAddr(t)},
		{"admin.listen", freeAddr(t), inUse},
	} {
		t.Run(tc.field, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			out, code := serveOnce(t, fmt.Sprintf("listen: %q\nadmin: { listen: %q }\ndata_dir: %q\nsources: [{name: a, request_id: \"json:id\"}]\n",
				tc.listen, tc.admin, dataDir))
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			want := fmt.Sprintf("Error: %s: %s is already in use by another process", tc.field, inUse)
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("data_dir %s was created (%v) by a start that failed on its address", dataDir, err)
			}
		})
	}
}

// A second webhookd on a data_dir in use says which process holds it and
// exits, and the first goes on serving.
func TestSecondGatewayOnOneDataDir(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	config := func(public, admin string) string {
		return fmt.Sprintf("listen: %q\nadmin: { listen: %q }\ndata_dir: %q\nsources: [{name: a, request_id: \"json:id\"}]\n", public, admin, dataDir)
	}
	public := freeAddr(t)
	first := startBinary(t, configCheckFile(t, "first.yaml", config(public, freeAddr(t))), public)

	out, code := serveOnce(t, config(freeAddr(t), freeAddr(t)))
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	want := fmt.Sprintf("Error: data_dir: %s is in use by another process, PID %d (from %s), most likely another webhookd",
		dataDir, first.cmd.Process.Pid, filepath.Join(dataDir, "LOCK"))
	if !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "Badger") {
		t.Errorf("output has Badger's own words:\n%s", out)
	}
	resp, err := http.Get("http://" + public + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("the first gateway's /readyz: %d after the second tried its data_dir", resp.StatusCode)
	}
}

// At start, webhookd warns of an admin token left empty and of each source
// that verifies no signature, and of nothing else.
func TestStartWarnsOfWhatIsLeftOpen(t *testing.T) {
	for _, tc := range []struct {
		name, token string
		want        []string
	}{
		{"no token", "", []string{
			"no admin token: the admin API and the console refuse every call; set admin.token (the example configuration reads it from WEBHOOKD_ADMIN_TOKEN)",
			"source without signature verification: anyone who can reach its URL can deliver to it; set its verify to check the sender source=open",
			"source without signature verification: anyone who can reach its URL can deliver to it; set its verify to check the sender source=none",
		}},
		{"token", "s3cret", []string{
			"source without signature verification: anyone who can reach its URL can deliver to it; set its verify to check the sender source=open",
			"source without signature verification: anyone who can reach its URL can deliver to it; set its verify to check the sender source=none",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := configs.Parse([]byte(fmt.Sprintf(`
listen: "127.0.0.1:0"
admin: { listen: "127.0.0.1:0", token: %q }
data_dir: %q
sources:
  - name: open
    request_id: json:id
  - name: signed
    request_id: json:id
    verify: { scheme: hmac-sha256, header: X-Signature, secrets: ["a-secret-of-sixteen-bytes"] }
  - name: none
    request_id: json:id
    verify: { scheme: none }
`, tc.token, t.TempDir())))
			if err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zapcore.WarnLevel)
			m := NewMain(cfg, zap.New(core))
			if err := m.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer m.Close(context.Background())
			var got []string
			for _, e := range logs.All() {
				line := e.Message
				for k, v := range e.ContextMap() {
					if k == "source" {
						line += fmt.Sprintf(" %s=%v", k, v)
					}
				}
				got = append(got, line)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
