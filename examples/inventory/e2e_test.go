package main

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const adminToken = "e2e-token"

// proc is one of the real binaries, restartable. Its methods run on the
// test's goroutine.
type proc struct {
	t     *testing.T
	name  string
	args  []string
	ready func() bool
	mu    sync.Mutex
	cmd   *exec.Cmd
	log   *os.File
}

func startProc(t *testing.T, name string, ready func() bool, args ...string) *proc {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), filepath.Base(name)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, args: args, ready: ready, log: log}
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *proc) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cmd = exec.Command(p.name, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.cmd = nil
		p.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !p.ready() {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(p.log.Name())
			p.t.Fatalf("%s did not become ready:\n%s", p.name, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

func (p *proc) restart() {
	p.kill()
	p.start()
}

func build(t *testing.T, dir, name, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func answers(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// reservation is one event the test's shop sends.
type reservation struct {
	id, sku  string
	version  string
	seq      int // version as a number
	quantity int
	resend   bool // the shop sends it twice, as a provider retries
}

func (r reservation) body() string {
	return fmt.Sprintf(`{"id":%q,"type":"ReservationAccepted","reservation_id":"r-%s","sku":%q,"quantity":%d,"sku_version":%q}`,
		r.id, r.id, r.sku, r.quantity, r.version)
}

// TestEndToEnd runs webhookd in front of the inventory service on
// PostgreSQL: 2,000 reservations, some sent twice, some overtaken by a
// newer version of their SKU, some malformed; the service is SIGKILLed
// three times and webhookd once while they go. At the end every accepted
// reservation is applied exactly once, and nothing stale or rejected.
func TestEndToEnd(t *testing.T) {
	dsn := os.Getenv("WEBHOOKD_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("WEBHOOKD_TEST_POSTGRES is not set")
	}
	if testing.Short() {
		t.Skip("builds and runs both binaries")
	}
	dir := t.TempDir()
	webhookdBin := build(t, dir, "webhookd", "github.com/webhookd/webhookd/cmd/webhookd")
	inventoryBin := build(t, dir, "inventory", ".")

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := make([]byte, 5)
	rand.Read(b)
	prefix := "inv_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		for _, table := range []string{"_stock", "_reservations", "_processed", "_processed_versions"} {
			db.Exec("DROP TABLE IF EXISTS " + prefix + table)
		}
	})

	const skus, initial = 40, 1000
	var stock []string
	for i := range skus {
		stock = append(stock, fmt.Sprintf("SKU-%d=%d", i, initial))
	}
	invAddr, public, admin := freeAddr(t), freeAddr(t), freeAddr(t)
	inventory := startProc(t, inventoryBin, func() bool { return answers("http://" + invAddr + "/stock") },
		"-listen", invAddr, "-db", dsn, "-prefix", prefix, "-stock", strings.Join(stock, ","))

	// The example's own webhookd.yaml, on this test's ports and data dir,
	// with retries quick enough for a test.
	raw, err := os.ReadFile("webhookd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.NewReplacer(
		`listen: ":8080"`, fmt.Sprintf("listen: %q", public),
		"data_dir: ./data", "data_dir: "+filepath.Join(dir, "data"),
		`listen: "127.0.0.1:8081"`, fmt.Sprintf("listen: %q", admin),
		`"${WEBHOOKD_ADMIN_TOKEN}"`, adminToken,
		"http://127.0.0.1:9000/webhooks", "http://"+invAddr+"/webhooks\n        timeout: 5s\n        max_attempts: 100000\n        backoff: { initial: 10ms, max: 200ms }",
		"level: info", "level: warn",
	).Replace(string(raw))
	if !strings.Contains(cfg, invAddr) || !strings.Contains(cfg, adminToken) {
		t.Fatalf("webhookd.yaml changed shape; the test's edits missed:\n%s", cfg)
	}
	cfgPath := filepath.Join(dir, "webhookd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	gateway := startProc(t, webhookdBin, func() bool { return answers("http://" + public + "/readyz") },
		"serve", "--config", cfgPath)

	// Each SKU's reservations in version order, then some pairs swapped,
	// so that the later version arrives first and the earlier is stale.
	rng := mrand.New(mrand.NewPCG(34, 1))
	const n = 2000
	perSKU := make([][]reservation, skus)
	for i := range n {
		s := rng.IntN(skus)
		r := reservation{id: fmt.Sprint("evt_", i), sku: fmt.Sprint("SKU-", s), quantity: 1 + rng.IntN(5), resend: rng.IntN(10) == 0}
		r.seq = len(perSKU[s]) + 1
		r.version = fmt.Sprint(r.seq)
		perSKU[s] = append(perSKU[s], r)
	}
	for _, rs := range perSKU {
		for i := 0; i+1 < len(rs); i += 2 + rng.IntN(6) {
			rs[i], rs[i+1] = rs[i+1], rs[i]
		}
	}
	var rejected []reservation // a version webhookd refuses: 400, never forwarded
	for i := range 20 {
		rejected = append(rejected, reservation{id: fmt.Sprint("bad_", i), sku: "SKU-0", quantity: 1, version: "v2"})
	}

	var sent atomic.Int64
	send := func(r reservation) int {
		for {
			resp, err := http.Post("http://"+public+"/hooks/shop", "application/json", strings.NewReader(r.body()))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode < 500 {
					sent.Add(1)
					return resp.StatusCode
				}
			}
			time.Sleep(20 * time.Millisecond) // webhookd is restarting
		}
	}
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for s := w; s < skus; s += workers {
				for _, r := range perSKU[s] {
					send(r)
					if r.resend {
						send(r)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for _, r := range rejected {
			if status := send(r); status != http.StatusBadRequest {
				t.Errorf("%s answered %d, want 400", r.id, status)
			}
		}
	})
	// The kills, at points of the load rather than of time.
	kills := []struct {
		at int64
		p  *proc
	}{{300, inventory}, {700, inventory}, {1100, gateway}, {1500, inventory}}
	for _, k := range kills {
		for sent.Load() < k.at {
			time.Sleep(5 * time.Millisecond)
		}
		k.p.restart()
	}
	wg.Wait()

	adminGet := func(path string, out any) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			json.NewDecoder(resp.Body).Decode(out)
		}
		return resp.StatusCode
	}
	drained := func() {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			var outbox, dead struct{ Items []any }
			adminGet("/admin/outbox?source=shop", &outbox)
			adminGet("/admin/deadletters?source=shop", &dead)
			if len(dead.Items) > 0 {
				t.Fatalf("dead letters: %v", dead.Items)
			}
			if len(outbox.Items) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d entries still in the outbox", len(outbox.Items))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	drained()

	// What webhookd decided, from its receipts.
	accepted := map[string]reservation{}
	latest := map[string]reservation{} // per SKU, the accepted one with the highest version
	stale, retried := 0, 0
	for _, rs := range perSKU {
		for _, r := range rs {
			var receipt struct {
				Decision string
				Routes   []struct {
					State    string
					Attempts int
				}
			}
			if status := adminGet("/admin/receipts/shop/"+r.id, &receipt); status != http.StatusOK {
				t.Fatalf("receipt of %s: %d", r.id, status)
			}
			switch receipt.Decision {
			case "accepted":
				if len(receipt.Routes) != 1 || receipt.Routes[0].State != "delivered" {
					t.Fatalf("%s accepted but %+v", r.id, receipt.Routes)
				}
				accepted[r.id] = r
				if receipt.Routes[0].Attempts > 1 {
					retried++
				}
				if l, ok := latest[r.sku]; !ok || r.seq > l.seq {
					latest[r.sku] = r
				}
			case "stale":
				stale++
			default:
				t.Fatalf("%s decided %q", r.id, receipt.Decision)
			}
		}
	}
	for _, r := range rejected {
		if status := adminGet("/admin/receipts/shop/"+r.id, nil); status != http.StatusNotFound {
			t.Fatalf("rejected %s has a receipt: %d", r.id, status)
		}
	}
	if stale == 0 || len(accepted)+stale != n {
		t.Fatalf("%d accepted and %d stale of %d: the load did not overtake versions as meant", len(accepted), stale, n)
	}

	if retried == 0 {
		t.Fatal("no forward was retried: the kills hit no delivery in flight")
	}

	// An operator redelivers each SKU's latest reservation: the service
	// gets its key again and must not apply it again.
	for _, r := range latest {
		req, _ := http.NewRequest(http.MethodPost, "http://"+admin+"/admin/receipts/shop/"+r.id+"/redeliver", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("redeliver %s: %d", r.id, resp.StatusCode)
		}
	}
	drained()

	// Every accepted reservation applied exactly once, nothing else.
	applied := map[string]int{}
	rows, err := db.Query("SELECT reservation_id FROM " + prefix + "_reservations")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		rows.Scan(&id)
		applied[strings.TrimPrefix(id, "r-")]++
	}
	rows.Close()
	want := map[string]int{}
	for _, r := range accepted {
		want[r.sku] += r.quantity
		if applied[r.id] != 1 {
			t.Errorf("accepted %s applied %d times", r.id, applied[r.id])
		}
	}
	if len(applied) != len(accepted) {
		for id := range applied {
			if _, ok := accepted[id]; !ok {
				t.Errorf("%s applied but not accepted by webhookd (stale or rejected)", id)
			}
		}
	}
	for s := range skus {
		sku := fmt.Sprint("SKU-", s)
		var got int
		if err := db.QueryRow("SELECT quantity FROM "+prefix+"_stock WHERE sku = $1", sku).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != initial-want[sku] {
			t.Errorf("%s: stock %d, want %d - %d = %d", sku, got, initial, want[sku], initial-want[sku])
		}
	}
	var keys int
	db.QueryRow("SELECT COUNT(*) FROM " + prefix + "_processed WHERE decision = 'applied'").Scan(&keys)
	if keys != len(accepted) {
		t.Errorf("%d keys recorded applied, want %d", keys, len(accepted))
	}
	t.Logf("%d reservations: %d accepted and applied once (%d after a failed forward), %d stale, %d rejected; %d redelivered as duplicates",
		n, len(accepted), retried, stale, len(rejected), len(latest))
}
