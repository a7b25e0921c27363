package store

import (
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// freeBytes returns the bytes of dir's filesystem that an unprivileged
// process may still take: the blocks a filesystem keeps for root are not
// counted, so that webhookd running as root stops where others would.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// fallocate allocates n bytes of f from off, extending it. A filesystem
// without fallocate answers EOPNOTSUPP, which is errors.ErrUnsupported.
func fallocate(f *os.File, off, n int64) error {
	return unix.Fallocate(int(f.Fd()), 0, off, n)
}

// allocated returns the bytes of disk the file of info takes: its
// allocated 512-byte blocks.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
