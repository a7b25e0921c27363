//go:build unix

package store

import (
	"crypto/rand"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

// TestExpiredReceiptsGiveTheirDiskBack fills the store with a burst of
// forwarded deliveries whose payload copies dominate the directory, lets
// them expire, and checks that the directory gives most of that back.
//
// Payload copies are above Badger's value threshold, so they sit in the
// value log, and RunGC (value-log GC) rewrites a file only once Badger
// knows that half of it is gone: it learns that when a compaction drops
// the expired keys, and compactions follow writes. The traffic after the
// burst is one provider retrying one request: it makes Badger flush and
// compact while adding almost nothing live, so what the directory loses is
// the burst.
func TestExpiredReceiptsGiveTheirDiskBack(t *testing.T) {
	const (
		burst     = 200
		bodySize  = 16 << 10
		burstSize = burst * bodySize
		// A few retries at a time, until compactions have dropped the
		// burst's keys and RunGC its value-log files; the bound only stops
		// a broken test.
		retriesPerRound = 20
		maxRounds       = 500
	)
	dir := t.TempDir()
	s := New(dir)
	s.ReceiptTTL = time.Second
	s.GCInterval = time.Hour // the test runs GC itself
	// Receipts and bodies are in the value log, so the memtables hold keys
	// and pointers: 64 KiB memtables make Badger flush every few hundred
	// retries and compact after ten flushes, instead of after millions;
	// the burst stays under Badger's 10 MiB base level size, so it lands
	// in one level whose tables the next L0 compaction rewrites. 1 MiB
	// value-log files spread the burst over several, of which only the
	// last is still being written.
	s.memTableSize = 64 << 10
	s.vlogFileSize = 1 << 20
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	for i := range burst {
		body := make([]byte, bodySize)
		rand.Read(body) // incompressible, so the disk holds every byte
		d := delivery(fmt.Sprint("burst-", i), "", "")
		d.Body = body
		mustDecide(t, s, d)
	}
	// The downstream took everything: the outbox empties and only the
	// payload copies, kept for redelivery as long as the receipts, remain.
	entries := outbox(t, s)
	if len(entries) != burst {
		t.Fatalf("outbox: %d entries, want %d", len(entries), burst)
	}
	for _, e := range entries {
		settle(t, s, e, forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: time.Now()})
	}
	peak := diskUsage(t, dir)
	if peak < burstSize {
		t.Fatalf("directory holds %d bytes, less than the burst's %d bytes of payload: the test measures nothing", peak, burstSize)
	}

	time.Sleep(2 * s.ReceiptTTL)
	if _, err := s.Receipt(ctx, "billing", "burst-0"); webhookd.ErrorCode(err) != webhookd.ENOTFOUND {
		t.Fatalf("receipt after its TTL: %v, want not found", err)
	}
	s.RunGC()
	afterGCOnly := diskUsage(t, dir)

	retry := delivery("zz-retried", "", `{"request_id":"zz-retried"}`)
	after, rounds := afterGCOnly, 0
	for ; after*2 > peak; rounds++ {
		if rounds == maxRounds {
			t.Fatalf("after %d retries and RunGC, the directory holds %d bytes of the burst's peak %d: want less than half", rounds*retriesPerRound, after, peak)
		}
		for i := range retriesPerRound {
			retry.DeliveryID = fmt.Sprint("dlv-", rounds, "-", i)
			retry.ReceivedAt = time.Now()
			mustDecide(t, s, retry)
		}
		s.RunGC()
		after = diskUsage(t, dir)
	}
	t.Logf("burst of %d x %d B payloads: %d B on disk; after expiry and RunGC alone: %d B; after %d retries and RunGC: %d B",
		burst, bodySize, peak, afterGCOnly, rounds*retriesPerRound, after)
}

// diskUsage is what du reports for dir: allocated blocks, not apparent
// sizes. Badger's value log and memtable files are preallocated and
// sparse (the value log claims 2 GiB while holding nothing), so apparent
// sizes say nothing about the disk given back.
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += info.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}
