//go:build !unix

package main

import "errors"

func freeSpace(string) (int64, error) {
	return 0, errors.New("not reported on this operating system")
}
