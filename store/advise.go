package store

import (
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// adviseInterval is the least time between two scans for memtable logs to
// advise. A new log is found after at most this much of the writes it takes.
const adviseInterval = 20 * time.Millisecond

// dirSettled is how long after the data directory last changed every log
// created in it is surely mapped: Badger maps a log right after creating it.
const dirSettled = 100 * time.Millisecond

// adviseLogs keeps readahead off Badger's memtable logs (see
// adviseRandom): after commits, at most once per adviseInterval, it advises
// the log mappings it has not advised yet. Badger creates a log whenever it
// rotates its memtable and offers no hook for it, so this follows commits.
//
// Reading /proc/self/maps costs tens of microseconds, more as Badger maps
// more tables, so it is read only while the directory's entries may have
// changed since it was last read: a new log is a new file, and a new file
// changes the directory's modification time.
func (s *Store) adviseLogs() {
	defer s.wg.Done()
	dir, _ := filepath.Abs(s.Path)
	// The kernel names mapped files by their real path.
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	advised := map[string]bool{}
	var settled time.Time // the directory's modification time when last seen settled
	for {
		select {
		case <-s.closing:
			return
		case <-s.committed:
		}
		fi, err := os.Stat(dir)
		if err != nil || !fi.ModTime().Equal(settled) {
			if advised, err = adviseRandom(dir, advised); err != nil {
				s.Logger.Warn("cannot advise Badger's memtable logs: commits may write whole cached folios instead of the pages they change",
					zap.Error(err))
				return
			}
			if fi != nil && time.Since(fi.ModTime()) > dirSettled {
				settled = fi.ModTime()
			}
		}
		select {
		case <-s.closing:
			return
		case <-time.After(adviseInterval):
		}
	}
}
