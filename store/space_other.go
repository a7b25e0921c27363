//go:build !linux

package store

import (
	"errors"
	"io/fs"
	"os"
)

// freeBytes cannot read the free space here: the store does not watch it.
func freeBytes(string) (int64, error) { return 0, errors.ErrUnsupported }

// fallocate is Linux's: the ballast is written instead.
func fallocate(*os.File, int64, int64) error { return errors.ErrUnsupported }

// allocated is the file's apparent size here, which overstates the disk
// that sparse files take.
func allocated(info fs.FileInfo) int64 { return info.Size() }
