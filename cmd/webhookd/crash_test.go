package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildBinary builds webhookd once per test binary run.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "webhookd-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "webhookd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// process is the real binary, started on a config file.
type process struct {
	cmd *exec.Cmd
	log *os.File
}

// startBinary starts the binary and waits until public answers /readyz
// over plain HTTP.
func startBinary(t *testing.T, configPath, public string) *process {
	t.Helper()
	p := launchBinary(t, configPath)
	waitFor(t, "readyz", func() bool {
		resp, err := http.Get("http://" + public + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

// launchBinary starts the binary on configPath, its output in a log file,
// and kills it when the test ends; it does not wait for it to be ready.
func launchBinary(t *testing.T, configPath string) *process {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.CreateTemp(t.TempDir(), "webhookd-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", configPath)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, log: log}
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *process) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

// TestCrashLosesNothingAcknowledged kills the real binary with SIGKILL while
// deliveries stream in, restarts it on the same data directory and resends
// everything, as a provider would. Every request ID that got a 2xx accepted
// must reach the downstream, none may be accepted twice, no resource may see
// an older version after a newer one, and the outbox must drain.
func TestCrashLosesNothingAcknowledged(t *testing.T) {
	rec, down := newRecorder(t)
	dir := t.TempDir()
	public, admin := freeAddr(t), freeAddr(t)
	configPath := filepath.Join(dir, "webhookd.yaml")
	if err := os.WriteFile(configPath, []byte(testConfig(t, filepath.Join(dir, "data"), down.URL, public, admin)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, public: public, admin: admin}

	const total, resources = 600, 20
	body := func(i int) string {
		return billing(fmt.Sprint("req-", i), fmt.Sprint("obj-", i%resources), i/resources+1)
	}
	var mu sync.Mutex
	accepted := map[string]int{}
	// send posts deliveries from next until stop says so; it records every
	// accepted answer and tolerates the connection errors of a killed server.
	send := func(from, to int, stop func(sent int) bool) {
		var wg sync.WaitGroup
		work := make(chan int)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					resp, err := http.Post("http://"+public+"/hooks/billing", "application/json", strings.NewReader(body(i)))
					if err != nil {
						continue
					}
					decision := resp.Header.Get("Webhook-Decision")
					resp.Body.Close()
					if resp.StatusCode/100 == 2 && decision == "accepted" {
						mu.Lock()
						accepted[fmt.Sprint("req-", i)]++
						mu.Unlock()
					}
				}
			}()
		}
		for i := from; i < to && !stop(i-from); i++ {
			work <- i
		}
		close(work)
		wg.Wait()
	}

	p := startBinary(t, configPath, public)
	var once sync.Once
	send(0, total, func(sent int) bool {
		if sent == total/3 {
			once.Do(func() { p.kill() }) // mid-stream, with requests in flight
		}
		return false
	})
	mu.Lock()
	beforeCrash := len(accepted)
	mu.Unlock()
	if beforeCrash == 0 {
		t.Fatal("nothing was accepted before the crash")
	}

	startBinary(t, configPath, public)
	send(0, total, func(int) bool { return false })

	waitFor(t, "empty outbox", func() bool { return len(c.items("/admin/outbox")) == 0 })
	mu.Lock()
	defer mu.Unlock()
	for id, n := range accepted {
		if n > 1 {
			t.Errorf("%s accepted %d times", id, n)
		}
		if rec.count(id) == 0 {
			t.Errorf("%s was acknowledged as accepted but never reached the downstream", id)
		}
	}
	got := rec.checkOrder(t)
	t.Logf("%d accepted before the crash, %d in all; downstream got %d requests", beforeCrash, len(accepted), got)
}

// TestSecondSignalStopsAtOnce sends SIGTERM while a forward is in flight to
// a downstream that never answers, so shutdown waits for it, then SIGTERM
// again: the second one must end the process at once.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release
	}))
	t.Cleanup(func() { close(release); down.Close() })
	dir := t.TempDir()
	public, admin := freeAddr(t), freeAddr(t)
	config := strings.NewReplacer("shutdown_timeout: 5s", "shutdown_timeout: 60s",
		"        max_attempts: 1000\n", "        max_attempts: 1000\n        timeout: 60s\n").
		Replace(testConfig(t, filepath.Join(dir, "data"), down.URL, public, admin))
	configPath := filepath.Join(dir, "webhookd.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, configPath, public)
	resp, err := http.Post("http://"+public+"/hooks/billing", "application/json", strings.NewReader(billing("req-1", "sub_1", 1)))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("delivery: %v %v", resp, err)
	}
	resp.Body.Close()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the forward never reached the downstream")
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		t.Fatalf("shutdown did not wait for the forward in flight: exited with %v", err)
	case <-time.After(time.Second):
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the second SIGTERM did not end the process")
	}
}
