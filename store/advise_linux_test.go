package store

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLogsAreAdvisedRandom(t *testing.T) {
	dir := t.TempDir()
	// A few MB of writes rotate the memtable, and its log, a few times;
	// their 4 KiB bodies go to the value log.
	s := openStore(t, dir, func(s *Store) { s.memTableSize = 1 << 20 })
	pad := strings.Repeat("x", 4<<10)
	for i := range 4000 {
		mustDecide(t, s, delivery(fmt.Sprint("req-", i), "d", fmt.Sprintf(`{"n":%d,"pad":%q}`, i, pad)))
	}

	// The advice follows commits; wait for the scan after the last one.
	var logs map[string][]string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if logs = logMappings(t, dir); len(logs) > 0 && allAdvised(logs) {
			break
		}
	}
	var mem, vlog int
	for path := range logs {
		switch filepath.Ext(path) {
		case ".mem":
			mem++
		case ".vlog":
			vlog++
		}
	}
	if mem == 0 || vlog == 0 {
		t.Fatalf("%d memtable logs and %d value-log files mapped, want both: %v", mem, vlog, logs)
	}
	for path, flags := range logs {
		if !slices.Contains(flags, "rr") {
			t.Errorf("%s is mapped without MADV_RANDOM (VmFlags %v)", filepath.Base(path), flags)
		}
	}
	// Logs created after Open, by rotation, are advised too.
	if _, err := os.Stat(filepath.Join(dir, "00001.mem")); !os.IsNotExist(err) {
		t.Errorf("the first memtable log is still there (stat: %v): the memtable never rotated", err)
	}
}

// logMappings returns the VmFlags of each mapping of a memtable log or
// value-log file in dir, by path, from /proc/self/smaps.
func logMappings(t *testing.T, dir string) map[string][]string {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	logs := map[string][]string{}
	var path string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case fields[0] == "VmFlags:":
			if path != "" {
				logs[path] = fields[1:]
			}
		case !strings.HasSuffix(fields[0], ":"): // a mapping's header line, as in /proc/self/maps
			path = logPath(line, real)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return logs
}

func allAdvised(logs map[string][]string) bool {
	for _, flags := range logs {
		if !slices.Contains(flags, "rr") {
			return false
		}
	}
	return true
}
