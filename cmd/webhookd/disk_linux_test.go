package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// minFree is the reserve the full-disk tests configure: small, so that a
// small tmpfs fills quickly.
const minFree = 32 << 20

// mountTmpfs mounts a tmpfs of size bytes on a new directory, or skips the
// test: mounting needs root, which CI has.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a full disk is tested on a tmpfs of its own, and mounting one needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("a full disk is tested on a tmpfs of its own, and mounting one failed: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func statfsFree(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// usable is the space webhookd compares with its reserve: the free space
// of dir's filesystem and the ballast it holds in dataDir.
func usable(t *testing.T, dir, dataDir string) int64 {
	t.Helper()
	free := statfsFree(t, dir)
	if fi, err := os.Stat(filepath.Join(dataDir, "ballast")); err == nil {
		free += fi.Size()
	}
	return free
}

// fill allocates a file of size bytes, as another process filling the disk.
func fill(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		t.Fatalf("fill %d bytes: %v", size, err)
	}
}

func diskConfig(t *testing.T, mnt, downstream string) (path, public, admin string) {
	public, admin = freeAddr(t), freeAddr(t)
	config := testConfig(t, filepath.Join(mnt, "data"), downstream, public, admin) + fmt.Sprintf("storage: { min_free: %d }\n", minFree)
	path = filepath.Join(t.TempDir(), "webhookd.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, public, admin
}

// TestStartWithTooLittleSpace starts the binary on a disk with less free
// space than its reserve: it must exit at once with an error that names the
// directory and both amounts, before Badger touches the disk.
func TestStartWithTooLittleSpace(t *testing.T) {
	mnt := mountTmpfs(t, 64<<20)
	configPath, _, _ := diskConfig(t, mnt, "http://127.0.0.1:9")
	fill(t, filepath.Join(mnt, "filler"), usable(t, mnt, mnt)-minFree/2)
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", configPath)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("webhookd did not exit on a disk without its reserve:\n%s", out.String())
	}
	if cmd.ProcessState.ExitCode() <= 0 {
		t.Errorf("exit: %v, want a non-zero exit code", err)
	}
	for _, want := range []string{filepath.Join(mnt, "data"), "bytes free", fmt.Sprintf("needs %d", minFree), "storage.min_free"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output does not name %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "SIGBUS") || strings.Contains(out.String(), "webhookd started") {
		t.Errorf("webhookd started, or faulted:\n%s", out.String())
	}
}

// TestFullDiskRefusesAndResumes runs the binary on a tmpfs of its own under
// load, fills the disk to the reserve with another file, and frees it
// again. While the space is short, new deliveries get 503 with Retry-After
// and /readyz 503, reads go on and the process lives; once the file is
// gone, deliveries are accepted again by the same process. Then, idle, the
// disk is filled to its last byte: webhookd gives its ballast back and
// refuses, and resumes when the file goes. After a restart every accepted
// delivery is there and was forwarded.
func TestFullDiskRefusesAndResumes(t *testing.T) {
	mnt := mountTmpfs(t, 128<<20)
	rec, down := newRecorder(t)
	configPath, public, admin := diskConfig(t, mnt, down.URL)
	dataDir := filepath.Join(mnt, "data")
	c := &client{t: t, public: public, admin: admin}
	p := startBinary(t, configPath, public)

	var mu sync.Mutex
	var accepted []string
	refused := 0 // 503s with Retry-After
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted), refused
	}
	pad := strings.Repeat("x", 16<<10)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ { // a bound; stop comes much sooner
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("req-%d-%d", w, i)
				body := fmt.Sprintf(`{"request_id":%q,"object":{"id":%q,"version":1},"pad":%q}`, id, "obj-"+id, pad)
				resp, err := http.Post("http://"+public+"/hooks/billing", "application/json", strings.NewReader(body))
				if err != nil {
					t.Errorf("delivery %s: %v (webhookd died?)", id, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				retry := false
				switch {
				case resp.StatusCode == 202 && resp.Header.Get("Webhook-Decision") == "accepted":
					accepted = append(accepted, id)
				case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "":
					refused++
					retry = true
				default:
					t.Errorf("delivery %s: %d %s", id, resp.StatusCode, resp.Header.Get("Webhook-Decision"))
				}
				mu.Unlock()
				if retry {
					time.Sleep(10 * time.Millisecond) // backs off, as a sender told to retry later does
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	waitFor(t, "deliveries accepted", func() bool { n, _ := counts(); return n >= 50 })

	// Another process takes all but a MB under the reserve.
	filler := filepath.Join(mnt, "filler")
	fill(t, filler, usable(t, mnt, dataDir)-minFree+1<<20)
	waitFor(t, "503 on /readyz", readyz(t, public, 503))
	_, before := counts()
	waitFor(t, "deliveries refused", func() bool { _, n := counts(); return n >= before+20 })
	mu.Lock()
	first := accepted[0]
	mu.Unlock()
	if status, body := c.adminCall(http.MethodGet, "/admin/receipts/billing/"+first); status != 200 || body["decision"] != "accepted" {
		t.Errorf("reading a receipt while the disk is full: %d %v", status, body)
	}
	if got := scrape(t, admin); !strings.Contains(got, "\nwebhookd_disk_low 1\n") || !strings.Contains(got, "\nwebhookd_disk_low_total 1\n") {
		t.Errorf("/metrics while the disk is full lacks webhookd_disk_low 1 and webhookd_disk_low_total 1")
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "200 on /readyz", readyz(t, public, 200))
	after, _ := counts()
	waitFor(t, "deliveries accepted again", func() bool { n, _ := counts(); return n >= after+20 })
	if err := p.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("webhookd is not the process that refused: %v", err)
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})

	// Another process takes every free byte while webhookd idles: the
	// ballast is freed, so what Badger writes next has room.
	waitFor(t, "empty outbox", func() bool { return len(c.items("/admin/outbox")) == 0 })
	fill(t, filler, statfsFree(t, mnt))
	waitFor(t, "503 on /readyz", readyz(t, public, 503))
	waitFor(t, "the ballast given back", func() bool { return statfsFree(t, mnt) >= minFree/2 })
	if status, body := c.post("billing", billing("req-full", "obj-full", 1)); status != 503 {
		t.Errorf("delivery on a disk full to the last byte: %d %v", status, body)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "200 on /readyz", readyz(t, public, 200))
	if status, body := c.post("billing", billing("req-full", "obj-full", 1)); status != 202 {
		t.Errorf("delivery once the disk has room again: %d %v", status, body)
	}
	accepted = append(accepted, "req-full")

	log, _ := os.ReadFile(p.log.Name())
	if !strings.Contains(string(log), "under the reserve") || strings.Contains(string(log), "SIGBUS") {
		t.Errorf("log lacks the line saying why deliveries were refused, or shows a fault:\n%s", log)
	}

	// Every acknowledged delivery survives a crash and is forwarded.
	p.kill()
	startBinary(t, configPath, public)
	waitFor(t, "empty outbox", func() bool { return len(c.items("/admin/outbox")) == 0 })
	mu.Lock()
	defer mu.Unlock()
	for _, id := range accepted {
		if rec.count(id) == 0 {
			t.Errorf("%s was acknowledged as accepted but never reached the downstream", id)
		}
		if status, _ := c.adminCall(http.MethodGet, "/admin/receipts/billing/"+id); status != 200 {
			t.Errorf("%s was acknowledged as accepted but has no receipt: %d", id, status)
		}
	}
	t.Logf("%d accepted, %d refused with 503", len(accepted), refused)
}

// readyz reports whether /readyz answers status, with Retry-After on a 503.
func readyz(t *testing.T, public string, status int) func() bool {
	return func() bool {
		resp, err := http.Get("http://" + public + "/readyz")
		if err != nil {
			t.Fatalf("readyz: %v (webhookd died?)", err)
		}
		resp.Body.Close()
		return resp.StatusCode == status && (status != 503 || resp.Header.Get("Retry-After") != "")
	}
}

func scrape(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return string(raw)
}
