package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookd/webhookd/postgres/pgtest"
)

// replicaConfig is testConfig on PostgreSQL, with a forward timeout short
// enough that a killed replica's claims end within the test.
func replicaConfig(t *testing.T, dsn, url, listen, adminListen string) string {
	c := testConfig(t, "", url, listen, adminListen)
	c = strings.Replace(c, "data_dir: \"\"\n", fmt.Sprintf("storage: { backend: postgres, dsn: %q }\n", dsn), 1)
	return strings.Replace(c, "        max_attempts: 1000\n", "        max_attempts: 1000\n        timeout: 2s\n", 1)
}

// TestReplicasLoseNothingAcknowledged runs three webhookd processes on one
// database. A client spreads deliveries over them round-robin, with
// redeliveries to another replica and versions out of order, and one
// replica is SIGKILLed mid-load and started again. Then every request is
// decided, none was accepted twice, every accepted one reached the
// downstream, in version order per resource, and the outbox is empty.
func TestReplicasLoseNothingAcknowledged(t *testing.T) {
	dsn := pgtest.SchemaDSN(t, t.Name())
	rec, down := newRecorder(t)
	type replica struct {
		public, admin, config string
		p                     *process
	}
	var reps []*replica
	for i := range 3 {
		r := &replica{public: freeAddr(t), admin: freeAddr(t)}
		r.config = filepath.Join(t.TempDir(), fmt.Sprintf("webhookd-%d.yaml", i))
		if err := os.WriteFile(r.config, []byte(replicaConfig(t, dsn, down.URL, r.public, r.admin)), 0o600); err != nil {
			t.Fatal(err)
		}
		reps = append(reps, r)
	}
	// Started together, they migrate the empty schema under one lock.
	var wg sync.WaitGroup
	for _, r := range reps {
		wg.Go(func() { r.p = startBinary(t, r.config, r.public) })
	}
	wg.Wait()

	const total, resources = 900, 30
	body := func(i int) string {
		return billing(fmt.Sprint("req-", i), fmt.Sprint("obj-", i%resources), i/resources+1)
	}
	// Versions of a resource arrive out of order within windows of 4.
	order := make([]int, total)
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for w := 0; w < total; w += 4 * resources {
		window := order[w:min(w+4*resources, total)]
		rng.Shuffle(len(window), func(a, b int) { window[a], window[b] = window[b], window[a] })
	}

	var mu sync.Mutex
	accepted := map[string]int{}
	decided := map[string]bool{}
	// post sends delivery i to replica first, or to the next one that
	// answers, as a load balancer would; it records the decision.
	post := func(i, first int) {
		for k := range len(reps) {
			r := reps[(first+k)%len(reps)]
			resp, err := http.Post("http://"+r.public+"/hooks/billing", "application/json", strings.NewReader(body(i)))
			if err != nil {
				continue
			}
			decision := resp.Header.Get("Webhook-Decision")
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				continue
			}
			mu.Lock()
			decided[fmt.Sprint("req-", i)] = true
			if decision == "accepted" {
				accepted[fmt.Sprint("req-", i)]++
			}
			mu.Unlock()
			return
		}
	}
	send := func(at func(sent int)) {
		work := make(chan int)
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() {
				for n := range work {
					i := order[n]
					post(i, n%len(reps))
					if n%5 == 0 { // a redelivery, to another replica
						post(i, (n+1)%len(reps))
					}
				}
			})
		}
		for n := range total {
			at(n)
			work <- n
		}
		close(work)
		wg.Wait()
	}

	victim := reps[1]
	send(func(sent int) {
		switch sent {
		case total / 3:
			victim.p.kill() // mid-load, with requests and claims in flight
		case 2 * total / 3:
			victim.p = startBinary(t, victim.config, victim.public)
		}
	})
	// The provider sends again whatever it got no 2xx for, and more.
	send(func(int) {})

	c := &client{t: t, public: reps[0].public, admin: reps[0].admin}
	// The killed replica's claims end after their lease (timeout + 30s).
	deadline := time.Now().Add(90 * time.Second)
	for len(c.items("/admin/outbox")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("outbox still holds %d entries", len(c.items("/admin/outbox")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(decided) != total {
		t.Errorf("%d of %d requests decided", len(decided), total)
	}
	for id, n := range accepted {
		if n > 1 {
			t.Errorf("%s accepted %d times", id, n)
		}
	}
	// Every accepted request, whichever replica decided it and whether or
	// not its answer got back, reached the downstream.
	forwarded := 0
	for i := range total {
		id := fmt.Sprint("req-", i)
		status, r := c.adminCall(http.MethodGet, "/admin/receipts/billing/"+id)
		if status != 200 {
			t.Errorf("receipt %s: %d %v", id, status, r)
			continue
		}
		if r["decision"] != "accepted" {
			if accepted[id] > 0 {
				t.Errorf("%s was answered accepted, its receipt says %v", id, r["decision"])
			}
			continue
		}
		forwarded++
		if rec.count(id) == 0 {
			t.Errorf("%s was accepted but never reached the downstream", id)
		}
	}
	got := rec.checkOrder(t)
	t.Logf("%d requests, %d accepted; the downstream got %d requests", total, forwarded, got)
}
