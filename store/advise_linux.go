package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// adviseRandom advises MADV_RANDOM for every mapping of a memtable log
// (dir/*.mem) or value-log file (dir/*.vlog) that is not in advised, and
// returns the log mappings there are now, advised.
//
// Why: Badger appends each commit to its memtable log, and the commit's
// bodies to its value log, through shared mappings of the files and
// msyncs them. Linux fills a mapping that is touched in order through
// readahead, which grows as it goes and, on filesystems that cache files
// in large folios (XFS, and ext4 on recent kernels: seen on 6.18), caches
// the file in folios of up to 2 MiB. A
// commit then dirties a few bytes of a folio and the sync writes all of it:
// Badger alone wrote 600 KB to 1 MB per synced commit of 26 KB. Without
// readahead a fault caches one page, and a sync writes the pages the commit
// changed. The advice only tunes readahead; it never changes what the
// mapping holds.
func adviseRandom(dir string, advised map[string]bool) (map[string]bool, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return advised, err
	}
	now := make(map[string]bool, len(advised))
	for mapping := range strings.SplitSeq(string(maps), "\n") {
		if logPath(mapping, dir) == "" {
			continue
		}
		if !advised[mapping] {
			if err := madviseRandom(mapping); err != nil {
				return advised, err
			}
		}
		now[mapping] = true
	}
	return now, nil
}

// logPath returns the path of the memtable log or value-log file in dir
// that a line of /proc/self/maps (start-end perms offset dev inode path)
// maps, or "".
func logPath(line, dir string) string {
	slash := strings.IndexByte(line, '/') // only the path has one
	if slash < 0 || !strings.HasSuffix(line, ".mem") && !strings.HasSuffix(line, ".vlog") || filepath.Dir(line[slash:]) != dir {
		return ""
	}
	return line[slash:]
}

// madviseRandom advises MADV_RANDOM for the address range at the start of
// a /proc/self/maps line.
func madviseRandom(mapping string) error {
	span, _, _ := strings.Cut(mapping, " ")
	lo, hi, _ := strings.Cut(span, "-")
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return fmt.Errorf("parse mapping %q", mapping)
	}
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_RANDOM)
	// ENOMEM: Badger unmapped the log since the maps were read, which is fine.
	if errno != 0 && errno != unix.ENOMEM {
		return fmt.Errorf("madvise %s: %w", span, errno)
	}
	return nil
}
