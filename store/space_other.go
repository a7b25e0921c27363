//go:build !linux

package store

import (
	"errors"
	"os"
)

// freeBytes cannot read the free space here: the store does not watch it.
func freeBytes(string) (int64, error) { return 0, errors.ErrUnsupported }

// fallocate is Linux's: the ballast is written instead.
func fallocate(*os.File, int64, int64) error { return errors.ErrUnsupported }
