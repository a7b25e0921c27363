//go:build !linux

package store

// adviseRandom does nothing: the readahead that it turns off on Linux is
// Linux's.
func adviseRandom(dir string, advised map[string]bool) (map[string]bool, error) {
	return advised, nil
}
