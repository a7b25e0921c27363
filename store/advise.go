package store

import (
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// adviseInterval is the least time between two scans for logs to advise.
// A new log is found after at most this much of the writes it takes.
const adviseInterval = 20 * time.Millisecond

// dirSettled is how long after the data directory last changed every log
// created in it is surely mapped: Badger maps a log right after creating it.
const dirSettled = 100 * time.Millisecond

// adviseLogs keeps readahead off Badger's memtable logs and value-log files
// (see adviseRandom): after commits, at most once per adviseInterval, it
// advises the log mappings it has not advised yet. Badger creates a log
// whenever it rotates its memtable or value log and offers no hook for it,
// so this follows commits.
func (s *Store) adviseLogs() {
	defer s.wg.Done()
	a := newLogAdvisor(s.Path)
	for {
		select {
		case <-s.closing:
			return
		case <-s.committed:
		}
		if err := a.advise(); err != nil {
			s.Logger.Warn("cannot advise Badger's logs: commits may write whole cached folios instead of the pages they change",
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

// logAdvisor advises the log mappings of one data directory that are new
// since it last looked.
//
// Reading /proc/self/maps costs tens of microseconds, more as Badger maps
// more tables, so it is read only while the directory's entries may have
// changed since it was last read: a new log is a new file, and a new file
// changes the directory's modification time.
type logAdvisor struct {
	dir     string
	advised map[string]bool
	settled time.Time // the directory's modification time when last seen settled
}

func newLogAdvisor(path string) *logAdvisor {
	dir, _ := filepath.Abs(path)
	// The kernel names mapped files by their real path.
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return &logAdvisor{dir: dir, advised: map[string]bool{}}
}

// advise advises the logs mapped since the directory last settled.
func (a *logAdvisor) advise() error {
	fi, err := os.Stat(a.dir)
	if err == nil && fi.ModTime().Equal(a.settled) {
		return nil
	}
	if a.advised, err = adviseRandom(a.dir, a.advised); err != nil {
		return err
	}
	if fi != nil && time.Since(fi.ModTime()) > dirSettled {
		a.settled = fi.ModTime()
	}
	return nil
}
