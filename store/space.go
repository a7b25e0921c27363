package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/webhookd/webhookd"
)

// spaceInterval is how often the free space of the data directory is read.
// statfs costs a microsecond; at full intake the store writes a few MB in
// this time, a small part of the reserve.
const spaceInterval = 100 * time.Millisecond

// ballastName is the ballast's file in the data directory. Badger opens
// only the files it named itself, so it leaves this one alone.
const ballastName = "ballast"

// ErrLowSpace is returned for decisions, a duplicate's too (it rewrites its
// receipt), and for admin writes that add data (redeliver, retry of a dead
// letter) while the data directory's free space is under the reserve.
// Reads, settling forward attempts and discarding dead letters go on: they
// write a few bytes each, and they are what gives space back.
var ErrLowSpace = &webhookd.Error{Code: webhookd.EUNAVAILABLE, Message: "storage is short of free space: new deliveries are refused until there is more; retry later"}

// Reserve returns the free space the store keeps in its directory for what
// Badger may still write once new decisions are refused:
//
//   - the rest of the memtable log being written, and that memtable's flush
//     to a table no larger than it (two memtables);
//   - a compaction step from level 0, which writes its level-0 tables
//     (NumLevelZeroTables flushed memtables) merged with the base level
//     before it deletes them;
//   - a value-log GC pass, which copies the live values of one value-log
//     file before it deletes it.
func Reserve(opts badger.Options) int64 {
	return opts.MemTableSize*int64(2+opts.NumLevelZeroTables) + opts.BaseLevelSize + opts.ValueLogFileSize
}

// space keeps the data directory's free space above a reserve, so that
// Badger never writes to a full disk. Badger writes its memtable logs,
// value logs and tables through shared memory mappings of sparse files: on
// a full disk a write to a page not yet allocated is not an error it can
// return but a SIGBUS that kills the process. So the store stops taking
// new decisions while the free space is under the reserve, and takes them
// again once there is more, by itself.
//
// Part of the reserve is held in a ballast file that only webhookd gives
// back: two memtables (a flush under way writes a table no larger than
// one, and the log being written may need another), at most half of the
// reserve. The moment the free space runs under the reserve, the ballast
// is emptied, so that a flush under way has room even when another
// process filled the disk; it is filled again when the space is back.
//
// A ballast was chosen over pre-allocating (fallocate) the files Badger
// maps. Badger creates a table and fills it through its mapping in one
// call (table.CreateTable), for a flush and a compaction alike, and
// creates memtable and value logs inside its own write path: webhookd
// would learn of a log only after Badger had begun writing through it, and
// could not reach a table at all. Pre-allocating a log would also take its
// whole mapping, twice what Badger writes to it. A ballast covers every
// file Badger writes, whatever its internals, for one fallocate. What it
// cannot do is keep another process from taking the space it gives back:
// data_dir belongs on a filesystem of its own.
//
// The free space it compares with the reserve counts the ballast in, since
// webhookd can free it at once. The zero space never refuses: it is the
// store's before Open, and where the free space cannot be read.
type space struct {
	dir     string
	reserve int64  // refuse below this
	from    string // where reserve comes from, for the error at Open
	resume  int64  // take decisions again from this: above the reserve, so that one write does not flap it
	ballast int64  // the ballast's size when held
	logger  *zap.Logger
	statfs  func(dir string) (int64, error) // free bytes; tests replace it

	held  atomic.Int64 // the ballast's bytes on disk; written by watch only
	free  atomic.Int64 // as last read, the ballast not included
	low   atomic.Bool
	lows  atomic.Uint64
	wrong bool // the last read failed; owned by watch
}

// SpaceStatus is the data directory's free space as the store last read it.
type SpaceStatus struct {
	Free    int64  // free bytes, for any process
	Ballast int64  // bytes the ballast holds, which webhookd counts as free
	Reserve int64  // new decisions are refused while Free+Ballast is under it
	Low     bool   // they are refused now
	Lows    uint64 // how often the free space ran under the reserve since Open
}

// Space returns the free space of the data directory as last read.
func (s *Store) Space() SpaceStatus {
	g := &s.space
	return SpaceStatus{Free: g.free.Load(), Ballast: g.held.Load(), Reserve: g.reserve, Low: g.low.Load(), Lows: g.lows.Load()}
}

// Allocated returns the bytes the data directory's files take on disk, as
// du counts them: allocated blocks, not apparent sizes. Badger maps its
// memtable logs and value logs as files of their full size that it fills
// as it goes (a fresh value log claims twice its 64 MiB while it holds
// nothing), so apparent sizes say little about the disk used. The ballast
// is not counted: it is free space held for the store (Space).
func (s *Store) Allocated() (int64, error) {
	entries, err := os.ReadDir(s.Path)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range entries {
		if e.Name() == ballastName || e.IsDir() {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // a table a compaction removed since the listing
		}
		if err != nil {
			return 0, err
		}
		total += allocated(info)
	}
	return total, nil
}

// openSpace checks that the data directory has the reserve free (minFree,
// or Reserve(opts) when 0) and fills the ballast. It runs before Badger
// opens: opening replays memtable logs, and a flush of them on a full disk
// would fault.
func (s *Store) openSpace(opts badger.Options) error {
	reserve, from := s.MinFree, "storage.min_free"
	if reserve <= 0 {
		reserve, from = Reserve(opts), "derived from Badger's sizes, or set as storage.min_free"
	}
	s.space = space{
		dir:     s.Path,
		reserve: reserve,
		from:    from,
		resume:  reserve + reserve/8,
		ballast: min(2*opts.MemTableSize, reserve/2),
		logger:  s.Logger,
		statfs:  s.space.statfs,
	}
	if s.space.statfs == nil {
		s.space.statfs = freeBytes
	}
	return s.space.open()
}

func (g *space) open() error {
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if fi, err := os.Stat(g.path()); err == nil {
		g.held.Store(fi.Size())
	}
	free, err := g.statfs(g.dir)
	if errors.Is(err, errors.ErrUnsupported) {
		g.logger.Warn("the free space of the data directory cannot be read here: a full disk will stop webhookd", zap.String("data_dir", g.dir))
		g.reserve, g.resume = 0, 0
		return nil
	}
	if err != nil {
		return fmt.Errorf("read free space of %s: %w", g.dir, err)
	}
	g.free.Store(free)
	if free += g.held.Load(); free < g.reserve {
		return &webhookd.Error{Code: webhookd.EUNAVAILABLE,
			Message: fmt.Sprintf("data_dir %s has %d bytes free, and webhookd needs %d (%s) before it starts: free some space or set a smaller storage.min_free",
				g.dir, free, g.reserve, g.from)}
	}
	if err := g.hold(); err != nil {
		return fmt.Errorf("fill the ballast %s: %w", g.path(), err)
	}
	g.logger.Info("keeping a reserve of free space in the data directory", zap.String("data_dir", g.dir),
		zap.Int64("reserve_bytes", g.reserve), zap.Int64("ballast_bytes", g.ballast), zap.Int64("free_bytes", free))
	return nil
}

func (g *space) path() string { return filepath.Join(g.dir, ballastName) }

// refusal returns ErrLowSpace while the free space is under the reserve.
func (g *space) refusal() error {
	if g.low.Load() {
		return ErrLowSpace
	}
	return nil
}

// watchSpace reads the free space every spaceInterval until Close.
func (s *Store) watchSpace() {
	defer s.wg.Done()
	if s.space.reserve == 0 {
		return
	}
	ticker := time.NewTicker(spaceInterval)
	defer ticker.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-ticker.C:
			s.space.check()
		}
	}
}

// check reads the free space once and makes the transition it calls for.
func (g *space) check() {
	free, err := g.statfs(g.dir)
	if err != nil {
		if !g.wrong {
			g.logger.Warn("cannot read the free space of the data directory; keeping the last state", zap.String("data_dir", g.dir), zap.Error(err))
		}
		g.wrong = true
		return
	}
	g.wrong = false
	g.free.Store(free)
	held := g.held.Load()
	switch low := g.low.Load(); {
	case !low && free+held < g.reserve:
		g.low.Store(true)
		g.lows.Add(1)
		err := g.release()
		g.logger.Warn("free space of the data directory is under the reserve: refusing new decisions until there is more, and freeing the ballast",
			zap.String("data_dir", g.dir), zap.Int64("free_bytes", free), zap.Int64("ballast_bytes", held),
			zap.Int64("reserve_bytes", g.reserve), zap.Int64("resume_bytes", g.resume), zap.NamedError("ballast_error", err))
	case low && free+held >= g.resume:
		if err := g.hold(); err != nil {
			return // taken again meanwhile: try on the next read
		}
		g.low.Store(false)
		g.logger.Info("free space of the data directory is back above the reserve: taking decisions again",
			zap.String("data_dir", g.dir), zap.Int64("free_bytes", free), zap.Int64("reserve_bytes", g.reserve))
	}
}

// hold gives the ballast its size, allocated.
func (g *space) hold() error {
	held := g.held.Load()
	if held == g.ballast {
		return nil
	}
	f, err := os.OpenFile(g.path(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if held > g.ballast {
		if err := f.Truncate(g.ballast); err != nil {
			return err
		}
	} else if err := allocate(f, held, g.ballast); err != nil {
		// Give back what a failed allocation kept, which the next try
		// allocates again.
		g.held.Store(0)
		return errors.Join(err, f.Truncate(0))
	}
	g.held.Store(g.ballast)
	return nil
}

// release empties the ballast, giving its blocks back at once.
func (g *space) release() error {
	if g.held.Load() == 0 {
		return nil
	}
	if err := os.Truncate(g.path(), 0); err != nil {
		return err
	}
	g.held.Store(0)
	return nil
}

// allocate makes f's blocks from off to size allocated: fallocate where
// the filesystem has it, else written zeros.
func allocate(f *os.File, off, size int64) error {
	err := fallocate(f, off, size-off)
	if !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	zeros := make([]byte, 1<<20)
	for n := size - off; n > 0; n -= int64(len(zeros)) {
		if _, err := f.Write(zeros[:min(n, int64(len(zeros)))]); err != nil {
			return err
		}
	}
	return nil
}
