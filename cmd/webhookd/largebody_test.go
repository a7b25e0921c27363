package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// GitHub caps payloads at 25 MB and does not retry a failed delivery: a
// large push refused is lost. A github source takes up to 25 MiB by its
// preset; such bodies are signed, decided, stored in Badger and forwarded
// byte for byte, and one over the cap is refused with a 413 that says it.
// (A 24 MiB push passes too, but takes half a minute under the race
// detector.)
func TestLargeGitHubPushesAreTakenAndForwarded(t *testing.T) {
	const secret = "github-large-body-secret"
	var mu sync.Mutex
	got := map[string][]byte{} // by Idempotency-Key
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(500)
			return
		}
		mu.Lock()
		got[r.Header.Get("Idempotency-Key")] = body
		mu.Unlock()
	}))
	defer downstream.Close()
	m, c := startMain(t, fmt.Sprintf(`
listen: 127.0.0.1:0
data_dir: %q
shutdown_timeout: 5s
log: { level: warn }
admin: { listen: 127.0.0.1:0, token: %q }
sources:
  - name: github
    verify: { scheme: github, secrets: [%q] }
    routes: [{ url: %q, pass_headers: [X-GitHub-Event] }]
`, t.TempDir(), adminToken, secret, downstream.URL))
	defer m.Close(context.Background())

	// A push of size bytes, or a little more: commits of 512 bytes each.
	push := func(size int) []byte {
		commit := `{"id":"` + strings.Repeat("c", 40) + `","message":"` + strings.Repeat("m", 421) + `","added":["src/f.go"]},`
		n := size/len(commit) + 1
		body := append([]byte(`{"ref":"refs/heads/main","commits":[`), bytes.Repeat([]byte(commit), n)...)
		body[len(body)-1] = ']'
		return append(body, '}')
	}
	send := func(delivery string, body []byte) *http.Response {
		t.Helper()
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		req, err := http.NewRequest(http.MethodPost, "http://"+c.public+"/hooks/github", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", delivery)
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	bodies := map[string][]byte{
		"7f3c2d10-0000-11ef-8000-000000000001": push(1_572_864), // the 1.5 MB push, over the global 1 MiB
		"7f3c2d10-0000-11ef-8000-000000000002": push(3 << 20),
	}
	for delivery, body := range bodies {
		resp := send(delivery, body)
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 202 {
			t.Fatalf("%d-byte push: %d %s, want 202 accepted", len(body), resp.StatusCode, answer)
		}
	}
	waitFor(t, "both pushes forwarded", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(bodies)
	})
	mu.Lock()
	for delivery, body := range bodies {
		if !bytes.Equal(got[delivery], body) {
			t.Errorf("%d-byte push %s: the downstream got %d bytes, not the same", len(body), delivery, len(got[delivery]))
		}
	}
	mu.Unlock()
	for delivery := range bodies {
		status, r := c.adminCall(http.MethodGet, "/admin/receipts/github/"+delivery)
		if status != 200 || forwardState(r, "default") != "delivered" {
			t.Errorf("receipt of %s: %d %v, want delivered", delivery, status, r)
		}
	}

	// Over the cap: refused on its declared length, before the body is read.
	conn, err := net.Dial("tcp", c.public)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /hooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 25<<20+1)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `{"error":"body is 26214401 bytes; source github takes at most 26214400","field":"body"}` + "\n"; resp.StatusCode != 413 || string(answer) != want {
		t.Errorf("a push over the cap: %d %s, want 413 %s", resp.StatusCode, answer, want)
	}
}
