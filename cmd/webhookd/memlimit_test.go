package main

import (
	"context"
	"github.com/webhookd/webhookd/store"
	"math"
	"runtime/debug"
	"testing"
	"testing/fstest"
)

func TestCgroupMemoryLimit(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s + "\n")} }
	for _, tc := range []struct {
		name  string
		fs    fstest.MapFS
		self  string
		want  int64
		found bool
	}{
		{
			name:  "v2 container: own cgroup at the mount's root",
			fs:    fstest.MapFS{"memory.max": file("2147483648")},
			self:  "0::/\n",
			want:  2 << 30,
			found: true,
		},
		{
			name: "v2 service: the parent's limit is the smaller",
			fs: fstest.MapFS{
				"system.slice/webhookd.service/memory.max": file("max"),
				"system.slice/memory.max":                  file("1073741824"),
			},
			self:  "0::/system.slice/webhookd.service\n",
			want:  1 << 30,
			found: true,
		},
		{
			name: "v2 service: its own limit is the smaller",
			fs: fstest.MapFS{
				"system.slice/webhookd.service/memory.max": file("536870912"),
				"system.slice/memory.max":                  file("1073741824"),
			},
			self:  "0::/system.slice/webhookd.service\n",
			want:  512 << 20,
			found: true,
		},
		{
			name: "v2 without a limit",
			fs:   fstest.MapFS{"user.slice/memory.max": file("max")},
			self: "0::/user.slice\n",
		},
		{
			name: "v1 without a limit reports the largest page-aligned int64",
			fs: fstest.MapFS{
				"memory/process_api/b978/memory.limit_in_bytes": file("9223372036854771712"),
				"memory/memory.limit_in_bytes":                  file("9223372036854771712"),
			},
			self: "9:name=systemd:/\n4:memory:/process_api/b978\n0::/\n",
		},
		{
			name:  "v1 container: host path absent, the mount's root holds the limit",
			fs:    fstest.MapFS{"memory/memory.limit_in_bytes": file("805306368")},
			self:  "5:cpu,cpuacct:/docker/0123\n4:memory:/docker/0123\n",
			want:  768 << 20,
			found: true,
		},
		{
			name:  "v1 memory in a combined hierarchy",
			fs:    fstest.MapFS{"memory/a/memory.limit_in_bytes": file("1073741824")},
			self:  "3:cpu,memory:/a\n",
			want:  1 << 30,
			found: true,
		},
		{
			name: "no cgroup files",
			fs:   fstest.MapFS{},
			self: "0::/\n",
		},
		{
			name: "unreadable values are no limit",
			fs:   fstest.MapFS{"memory.max": file("lots"), "memory/memory.limit_in_bytes": file("-1")},
			self: "0::/\n4:memory:/\n",
		},
		{
			name: "a memory-like controller name is not memory",
			fs:   fstest.MapFS{"memory/memory.limit_in_bytes": file("1073741824")},
			self: "4:memory_pressure:/\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found := cgroupMemoryLimit(tc.fs, tc.self)
			if got != tc.want || found != tc.found {
				t.Fatalf("cgroupMemoryLimit = %d, %v; want %d, %v", got, found, tc.want, tc.found)
			}
		})
	}
}

// The store sizes Badger from the soft limit the runtime has, however it was
// set (GOMEMLIMIT, the cgroup, or anything else).
func TestStoreGetsTheSoftMemoryLimit(t *testing.T) {
	const limit = 1536 << 20
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
	m, _ := startMain(t, testConfig(t, t.TempDir(), "http://127.0.0.1:1", "127.0.0.1:0", "127.0.0.1:0"))
	defer m.Close(context.Background())
	if got := m.Store.(*store.Store).MemoryLimit; got != limit {
		t.Errorf("store's memory limit %d, want %d", got, limit)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if got := softMemoryLimit(); got != 0 {
		t.Errorf("softMemoryLimit() = %d without a limit, want 0", got)
	}
}
