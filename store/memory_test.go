package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/webhookd/webhookd"
)

func TestTableSizes(t *testing.T) {
	const mb, gb = 1 << 20, 1 << 30
	for _, tc := range []struct {
		limit      int64
		memTable   int64
		multiplier int
	}{
		{0, 64 * mb, 2},            // no limit: Badger's defaults
		{256 * mb, 16 * mb, 1},     // never under 16 MB
		{768 * mb, 16 * mb, 1},     // 1 GiB cgroup: 24 MB, rounded down
		{1536 * mb, 32 * mb, 1},    // 2 GiB cgroup
		{3 * gb, 64 * mb, 1},       // 4 GiB cgroup
		{64 * gb, 64 * mb, 1},      // never over Badger's default
		{-1, 64 * mb, 2},           // not a limit
		{1<<62 + 1, 64 * mb, 1},    // no overflow
		{32*mb*32 - 1, 16 * mb, 1}, // just under 1 GiB: 32 MB - 1 rounds down
	} {
		memTable, multiplier := tableSizes(tc.limit)
		if memTable != tc.memTable || multiplier != tc.multiplier {
			t.Errorf("tableSizes(%d) = %d, %d; want %d, %d", tc.limit, memTable, multiplier, tc.memTable, tc.multiplier)
		}
	}
}

func TestOpenSizesBadgerFromTheMemoryLimit(t *testing.T) {
	s := New(t.TempDir())
	s.MemoryLimit = 1536 << 20
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if opts := s.db.Opts(); opts.MemTableSize != 32<<20 || opts.TableSizeMultiplier != 1 {
		t.Errorf("memtable %d, table size multiplier %d; want 32 MiB, 1", opts.MemTableSize, opts.TableSizeMultiplier)
	}
}

// A crash under no limit leaves memtable logs of 64 MB memtables; a restart
// under a limit must replay them, not fail for want of room.
func TestRestartUnderALimitReplaysLogsOfLargerMemtables(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	body := `{"pad":"` + strings.Repeat("x", 100<<10) + `"}`
	const n = 300 // 30 MB in the log, more than a 16 MB memtable holds
	for i := range n {
		mustDecide(t, s, delivery(fmt.Sprintf("req-%d", i), "d-1", body))
	}
	// Commits are synced, so a copy taken now holds what a crash leaves.
	crashed := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if logs, _ := filepath.Glob(filepath.Join(crashed, "*.mem")); len(logs) == 0 {
		t.Fatal("no memtable log to replay")
	}

	r := New(crashed)
	r.MemoryLimit = 512 << 20
	if err := r.Open(); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.db.Opts().MemTableSize; got != 16<<20 {
		t.Errorf("memtable %d after the replay, want 16 MiB", got)
	}
	for i := range n {
		if out := mustDecide(t, r, delivery(fmt.Sprintf("req-%d", i), "d-2", body)); out.Decision != webhookd.Duplicate {
			t.Fatalf("req-%d after the restart: %s, want duplicate", i, out.Decision)
		}
	}
}
