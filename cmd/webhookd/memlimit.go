package main

import (
	"bufio"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// cgroupUnlimited is where cgroup v1 starts meaning "no limit": it reports
// the largest page-aligned int64, not a keyword.
const cgroupUnlimited = 1 << 62

// setMemoryLimit gives the Go runtime a soft heap limit of 3/4 of the memory
// cgroup's limit, so that the garbage collector works harder before the
// container is killed rather than after. The other quarter is for what the
// limit does not cover and the cgroup is still charged for: pages of
// Badger's memory-mapped tables, which the kernel reclaims under pressure
// but which reads need resident. GOMEMLIMIT, when set, wins: the runtime
// has applied it already.
func setMemoryLimit(logger *zap.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		logger.Info("soft memory limit from GOMEMLIMIT", zap.String("GOMEMLIMIT", v))
		return
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return
	}
	limit, ok := cgroupMemoryLimit(os.DirFS("/sys/fs/cgroup"), string(self))
	if !ok {
		return
	}
	soft := limit / 4 * 3
	debug.SetMemoryLimit(soft)
	logger.Info("soft memory limit from the memory cgroup",
		zap.Int64("cgroup_limit_bytes", limit), zap.Int64("soft_limit_bytes", soft))
}

// softMemoryLimit returns the runtime's soft memory limit, however it was
// set, or 0 when there is none.
func softMemoryLimit() int64 {
	if limit := debug.SetMemoryLimit(-1); limit < math.MaxInt64 {
		return limit
	}
	return 0
}

// cgroupMemoryLimit returns the smallest memory limit set on the process's
// cgroup or any cgroup above it. cgroupFS is the cgroup mount
// (/sys/fs/cgroup) and self the content of /proc/self/cgroup. It reads
// cgroup v2 (memory.max) and v1 (memory/memory.limit_in_bytes). Inside a
// container the process's path may be the host's, while the mount shows the
// container's own cgroup at its root, so the root is always read too.
func cgroupMemoryLimit(cgroupFS fs.FS, self string) (int64, bool) {
	var best int64
	found := false
	consider := func(name string, parse func(string) (int64, bool)) {
		b, err := fs.ReadFile(cgroupFS, name)
		if err != nil {
			return
		}
		if n, ok := parse(strings.TrimSpace(string(b))); ok && (!found || n < best) {
			best, found = n, true
		}
	}
	sc := bufio.NewScanner(strings.NewReader(self))
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			for _, dir := range ancestors(parts[2]) {
				consider(path.Join(dir, "memory.max"), parseMemoryMax)
			}
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			for _, dir := range ancestors(parts[2]) {
				consider(path.Join("memory", dir, "memory.limit_in_bytes"), parseLimitInBytes)
			}
		}
	}
	return best, found
}

// ancestors returns p and the directories above it, as fs.FS names: "a/b",
// "a", ".".
func ancestors(p string) []string {
	dir := strings.Trim(path.Clean("/"+p), "/")
	var dirs []string
	for dir != "" && dir != "." {
		dirs = append(dirs, dir)
		dir = path.Dir(dir)
	}
	return append(dirs, ".")
}

// parseMemoryMax reads cgroup v2's memory.max: bytes, or "max" for none.
func parseMemoryMax(s string) (int64, bool) {
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

// parseLimitInBytes reads cgroup v1's memory.limit_in_bytes.
func parseLimitInBytes(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0 && n < cgroupUnlimited
}
