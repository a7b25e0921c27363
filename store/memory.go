package store

import (
	"fmt"
	"math/bits"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"
)

// Badger's own sizes, kept when the heap has no limit, and the smallest
// memtable a limit gets: 16 MB memtables already lengthened every tail on
// the bench, and Badger refuses ones under about 7 MB with its 1 MB value
// threshold.
const (
	badgerMemTableSize        = 64 << 20
	badgerTableSizeMultiplier = 2
	minMemTableSize           = 16 << 20
)

// tableSizes returns the memtable size and the growth of table sizes from
// one LSM level to the next for a process whose heap is limited to limit
// bytes (0: no limit, Badger's defaults).
//
// Most of a loaded store's heap is Badger building tables. It builds each
// table whole in memory, compressed blocks beside the raw ones, in a buffer
// that grows by doubling, and keeps up to eight of those buffers for reuse
// at the size they reached. A memtable flush builds a table as large as the
// memtable; a compaction builds up to a dozen at once, of the size its
// level's tables grow to (doubling per level: 8–16 MB at the deepest level
// of a few GB). Under a limit, tables keep Badger's base size (2 MB) at
// every level and memtables shrink with the limit (a 32nd of it, 16 to
// 64 MB), so those buffers stay a fraction of it.
func tableSizes(limit int64) (memTable int64, multiplier int) {
	if limit <= 0 {
		return badgerMemTableSize, badgerTableSizeMultiplier
	}
	memTable = min(max(limit/32, minMemTableSize), badgerMemTableSize)
	return 1 << (bits.Len64(uint64(memTable)) - 1), 1
}

// openBadger opens Badger with opts. Memtable logs in the directory were
// left by a crash, maybe by memtables larger than opts's: Badger replays a
// log into one memtable and exits the process when it does not fit. So
// those logs are replayed first at the largest size webhookd writes them
// with, and flushed into tables by closing.
func openBadger(opts badger.Options) (*badger.DB, error) {
	logs, err := filepath.Glob(filepath.Join(opts.Dir, "*.mem"))
	if err != nil {
		return nil, err
	}
	if len(logs) > 0 && opts.MemTableSize < badgerMemTableSize {
		db, err := badger.Open(opts.WithMemTableSize(badgerMemTableSize))
		if err != nil {
			return nil, fmt.Errorf("replay memtable logs: %w", err)
		}
		if err := db.Close(); err != nil {
			return nil, fmt.Errorf("flush replayed memtable logs: %w", err)
		}
	}
	return badger.Open(opts)
}
