//go:build unix

package main

import (
	"errors"
	"os"
	"syscall"
)

// dirLocked reports whether another process holds an exclusive flock on
// dir, as Badger takes on its directory. A directory that cannot be
// opened is not locked: the store's open says what is wrong with it.
func dirLocked(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	}
	return errors.Is(err, syscall.EWOULDBLOCK)
}
