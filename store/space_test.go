package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
)

func TestReserve(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		memTable, vlog int64
		want           int64
	}{
		// Badger's memtables, webhookd's 64 MB value-log files: two
		// memtables, five level-0 tables, the 10 MB base level, one
		// value-log file.
		{64 * mb, 64 * mb, (2+5)*64*mb + 10*mb + 64*mb},
		{16 * mb, 64 * mb, (2+5)*16*mb + 10*mb + 64*mb}, // under a soft memory limit
	} {
		opts := badger.DefaultOptions("").WithMemTableSize(tc.memTable).WithValueLogFileSize(tc.vlog)
		if got := Reserve(opts); got != tc.want {
			t.Errorf("Reserve(memtable %d MB, vlog %d MB) = %d, want %d", tc.memTable/mb, tc.vlog/mb, got, tc.want)
		}
	}
}

// fakeDisk is the free space a test's store reads: statfs is the one edge
// faked here; TestFullDisk in cmd/webhookd fills a real tmpfs.
type fakeDisk struct{ free atomic.Int64 }

func (d *fakeDisk) statfs(string) (int64, error) { return d.free.Load(), nil }

// openOnDisk opens a store whose free space is disk's, with a reserve of
// minFree (8 MB in these tests) and a ballast of half of it: two 4 MB
// memtables.
func openOnDisk(t *testing.T, dir string, disk *fakeDisk, minFree int64) *Store {
	return openStore(t, dir, func(s *Store) {
		s.memTableSize = 4 << 20
		s.MinFree = minFree
		s.space.statfs = disk.statfs
	})
}

func ballastSize(t *testing.T, dir string) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, ballastName))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// waitFree waits until the store has read free from disk, and then until
// it read once more, so that what the first read called for is done.
func waitFree(t *testing.T, s *Store, disk *fakeDisk, free int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, f := range []int64{free, free + 1} {
		disk.free.Store(f)
		for s.Space().Free != f {
			if time.Now().After(deadline) {
				t.Fatalf("the store never read %d bytes free", f)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestLowSpaceRefusesNewWritesAndResumes(t *testing.T) {
	const mb, reserve = 1 << 20, 8 << 20
	dir := t.TempDir()
	disk := &fakeDisk{}
	disk.free.Store(100 * mb)
	s := openOnDisk(t, dir, disk, reserve)
	if got := ballastSize(t, dir); got != reserve/2 {
		t.Fatalf("ballast %d bytes, want %d", got, reserve/2)
	}
	mustDecide(t, s, versioned("req-1", "sub_1", 1))
	if n := countOutbox(t, s); n != 1 {
		t.Fatalf("outbox: %d entries", n)
	}

	// Free space plus the ballast just under the reserve.
	waitFree(t, s, disk, reserve-reserve/2-2)
	st := s.Space()
	if !st.Low || st.Lows != 1 || st.Reserve != reserve {
		t.Fatalf("under the reserve: %+v, want low once, reserve %d", st, reserve)
	}
	if got := ballastSize(t, dir); got != 0 {
		t.Errorf("ballast under the reserve: %d bytes, want it emptied", got)
	}
	if err := s.Ready(); err != ErrLowSpace {
		t.Errorf("Ready under the reserve: %v, want ErrLowSpace", err)
	}
	if _, err := s.Decide(ctx, versioned("req-2", "sub_2", 1)); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Errorf("Decide under the reserve: %v, want unavailable", err)
	}
	if _, err := s.Decide(ctx, versioned("req-1", "sub_1", 1)); webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Errorf("a duplicate under the reserve (it rewrites its receipt): %v, want unavailable", err)
	}
	if err := s.Redeliver(ctx, "billing", "req-1", ""); err != ErrLowSpace {
		t.Errorf("Redeliver under the reserve: %v, want ErrLowSpace", err)
	}
	if err := s.RetryDeadLetter(ctx, ledger, "req-1"); err != ErrLowSpace {
		t.Errorf("RetryDeadLetter under the reserve: %v, want ErrLowSpace", err)
	}
	// Reads go on, and forwarding claims and settles what it sends.
	if r := receiptOf(t, s, "req-1"); r.Decision != webhookd.Accepted {
		t.Errorf("receipt under the reserve: %s", r.Decision)
	}
	claims := claimAll(t, s)
	if len(claims) != 1 {
		t.Fatalf("claimed %d entries under the reserve, want 1", len(claims))
	}
	if err := s.Settle(ctx, claims[0], forward.Result{State: webhookd.ForwardDelivered, Attempts: 1, Status: 200, At: time.Now()}); err != nil {
		t.Errorf("Settle under the reserve: %v", err)
	}
	if n := countOutbox(t, s); n != 0 {
		t.Errorf("outbox after settling under the reserve: %d entries", n)
	}

	// Back above the reserve, but not by the margin: still refusing.
	waitFree(t, s, disk, reserve)
	if !s.Space().Low {
		t.Error("took decisions again before the free space cleared the reserve by its margin")
	}
	waitFree(t, s, disk, reserve+reserve/8)
	if st := s.Space(); st.Low || st.Lows != 1 {
		t.Fatalf("above the reserve and its margin: %+v, want not low", st)
	}
	if got := ballastSize(t, dir); got != reserve/2 {
		t.Errorf("ballast after the space came back: %d bytes, want %d", got, reserve/2)
	}
	if err := s.Ready(); err != nil {
		t.Errorf("Ready after the space came back: %v", err)
	}
	if out := mustDecide(t, s, versioned("req-2", "sub_2", 1)); out.Decision != webhookd.Accepted {
		t.Errorf("after the space came back: %s", out.Decision)
	}
}

func TestOpenRefusesTooLittleSpace(t *testing.T) {
	const reserve = 8 << 20
	dir := t.TempDir()
	disk := &fakeDisk{}
	disk.free.Store(reserve - 1)
	s := New(dir)
	s.MinFree = reserve
	s.space.statfs = disk.statfs
	err := s.Open()
	if webhookd.ErrorCode(err) != webhookd.EUNAVAILABLE {
		t.Fatalf("Open with too little space: %v, want unavailable", err)
	}
	for _, want := range []string{dir, strconv.Itoa(reserve - 1), strconv.Itoa(reserve), "storage.min_free"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); !os.IsNotExist(err) {
		t.Errorf("Badger was opened on a disk without its reserve: %v", err)
	}
}

// A ballast left by an earlier run is webhookd's to free, so it counts as
// free space at Open, and is kept.
func TestOpenCountsItsBallastAsFree(t *testing.T) {
	const reserve = 8 << 20
	dir := t.TempDir()
	disk := &fakeDisk{}
	disk.free.Store(100 << 20)
	s := openOnDisk(t, dir, disk, reserve)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	disk.free.Store(reserve - reserve/2)
	openOnDisk(t, dir, disk, reserve)
	if got := ballastSize(t, dir); got != reserve/2 {
		t.Errorf("ballast after reopening: %d bytes, want %d", got, reserve/2)
	}
}

// Allocated is the disk the store takes: a store holding little takes
// little, whatever its mapped files' apparent sizes, and what it writes is
// counted.
func TestAllocatedCountsBlocksNotApparentSizes(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	mustDecide(t, s, delivery("req-1", "dlv-1", `{"id":"req-1"}`))
	small, err := s.Allocated()
	if err != nil {
		t.Fatal(err)
	}
	var apparent int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.Name() != ballastName {
			apparent += info.Size()
		}
	}
	// The ballast's blocks are allocated: a few MiB at most says it is not
	// counted.
	t.Logf("one decision: %d bytes allocated, %d apparent, ballast %d", small, apparent, s.Space().Ballast)
	if small <= 0 || small > 4<<20 || small*10 > apparent {
		t.Errorf("one decision takes %d bytes by Allocated, against %d apparent: want a little, far below the apparent size", small, apparent)
	}

	const n, body = 64, 32 << 10 // 2 MiB of bodies
	for i := range n {
		mustDecide(t, s, delivery(fmt.Sprint("big-", i), "dlv", fmt.Sprintf(`{"id":%d,"pad":%q}`, i, strings.Repeat("x", body))))
	}
	big, err := s.Allocated()
	if err != nil {
		t.Fatal(err)
	}
	if big-small < n*body {
		t.Errorf("after %d bytes of bodies, Allocated grew from %d to %d bytes", n*body, small, big)
	}
}
