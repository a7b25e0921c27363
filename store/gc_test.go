package store

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

func duSize(t *testing.T, dir string) (alloc, apparent int64, listing string) {
	entries, _ := os.ReadDir(dir)
	var b strings.Builder
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		alloc += st.Blocks * 512
		apparent += fi.Size()
		fmt.Fprintf(&b, "  %s apparent=%d alloc=%d\n", e.Name(), fi.Size(), st.Blocks*512)
	}
	return alloc, apparent, b.String()
}

func TestGCExperiment(t *testing.T) {
	mt, _ := strconv.Atoi(os.Getenv("MT"))
	n, _ := strconv.Atoi(os.Getenv("N"))
	bodySize, _ := strconv.Atoi(os.Getenv("BODY"))
	dir := t.TempDir()
	s := New(dir)
	s.ReceiptTTL = time.Second
	s.GCInterval = time.Hour
	s.memTableSize = int64(mt)
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			body := make([]byte, bodySize)
			rand.Read(body)
			d := webhookd.Delivery{Source: "billing", RequestID: fmt.Sprint(prefix, i), Fingerprint: "f", ReceivedAt: time.Now(), Forward: true, Body: []byte(body)}
			if _, err := s.Decide(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		es, err := s.Outbox(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if err := s.Settle(ctx, e, forward.Result{State: webhookd.ForwardDelivered, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	show := func(what string) {
		a, p, l := duSize(t, dir)
		lsm, vlog := s.db.Size()
		t.Logf("%s: alloc=%d apparent=%d lsm=%d vlog=%d\n%s", what, a, p, lsm, vlog, l)
	}
	write("a-", n)
	show("after writes")
	time.Sleep(2100 * time.Millisecond)
	s.RunGC()
	show("after expiry+RunGC")
	if os.Getenv("MORE") != "" {
		n2, _ := strconv.Atoi(os.Getenv("N2"))
		write("b-", n2)
		for s.db.Levels()[0].NumTables >= 5 {
			time.Sleep(10 * time.Millisecond)
		}
		for _, l := range s.db.Levels() {
			if l.NumTables > 0 {
				t.Logf("level %d: %d tables %d bytes", l.Level, l.NumTables, l.Size)
			}
		}
		show("after more writes")
		time.Sleep(500 * time.Millisecond)
		s.RunGC()
		show("after more writes + RunGC")
	}
}
