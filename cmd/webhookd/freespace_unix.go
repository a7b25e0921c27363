//go:build unix

package main

import "golang.org/x/sys/unix"

// freeSpace returns the bytes an unprivileged process may still write to
// the file system holding dir.
func freeSpace(dir string) (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return 0, err
	}
	return int64(fs.Bavail) * int64(fs.Bsize), nil
}
