package store

import (
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// adviseInterval is the least time between two scans for memtable logs to
// advise. A new log is found after at most this much of the writes it takes.
const adviseInterval = 20 * time.Millisecond

// adviseLogs keeps readahead off Badger's memtable logs (see
// adviseRandom): after commits, at most once per adviseInterval, it advises
// the log mappings it has not advised yet. Badger creates a log whenever it
// rotates its memtable and offers no hook for it, so this follows commits.
func (s *Store) adviseLogs() {
	defer s.wg.Done()
	dir, err := filepath.Abs(s.Path)
	if err == nil {
		// The kernel names mapped files by their real path.
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
	}
	advised := map[string]bool{}
	for {
		select {
		case <-s.closing:
			return
		case <-s.committed:
		}
		if advised, err = adviseRandom(dir, advised); err != nil {
			s.Logger.Warn("cannot advise Badger's memtable logs: commits may write whole cached folios instead of the pages they change",
				zap.Error(err))
			return
		}
		select {
		case <-s.closing:
			return
		case <-time.After(adviseInterval):
		}
	}
}
