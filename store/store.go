package store

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/versioning"
)

// Defaults for Options.
const (
	DefaultReceiptTTL     = 168 * time.Hour
	DefaultExpiryInterval = time.Minute
	DefaultGCInterval     = 5 * time.Minute
	DefaultMaxBatch       = 1024
)

// MaxBody is the largest body the store takes: Badger refuses values over
// 64 MiB, and a payload holds the body with its metadata.
const MaxBody = 32 << 20

// errTooBig fails an operation whose writes do not fit in one Badger
// transaction.
var errTooBig = webhookd.Errorf(webhookd.EINVALID, "operation too big for one transaction")

// ErrClosed is returned for operations submitted after Close.
var ErrClosed = &webhookd.Error{Code: webhookd.EUNAVAILABLE, Message: "store is closed"}

// Store satisfies the storage contract.
var _ storage.Backend = (*Store)(nil)

// Store is the Badger-backed receipt, version and outbox store.
type Store struct {
	Path       string
	ReceiptTTL time.Duration
	// ExpiryInterval is how often the keys of expired receipts are
	// deleted (Expire); GCInterval how often value-log GC runs (RunGC).
	ExpiryInterval time.Duration
	GCInterval     time.Duration
	MaxBatch       int
	Logger         *zap.Logger
	// MemoryLimit is the soft limit of the process's heap in bytes (0:
	// none). Badger's memtables and tables are sized from it (tableSizes).
	MemoryLimit int64
	// MinFree is the free space, in bytes, the store keeps in Path: new
	// decisions are refused below it (space.go). 0 derives it from
	// Badger's sizes (Reserve).
	MinFree int64
	// Now is the store's clock: what has expired, what is due, when a lease
	// ends. Keys expire in Badger by the wall clock too; a clock ahead of it
	// expires them earlier.
	Now func() time.Time

	db        *badger.DB
	ops       chan *op
	notify    chan struct{} // signalled after a commit that added or settled outbox entries
	committed chan struct{} // signalled after every commit, for adviseLogs
	mu        sync.RWMutex  // guards closed against submitters racing Close
	closed    bool
	failure   atomic.Pointer[webhookd.Error] // the first failed commit's, answered from then on
	failed    chan struct{}                  // closed with failure
	failOnce  sync.Once
	closing   chan struct{}
	wg        sync.WaitGroup

	nextSeq uint64         // next outbox position; owned by the writer goroutine
	staged  []badger.Entry // the batch's writes, owned by the writer goroutine (tx.flush)
	opPool  sync.Pool      // of *op, so that an operation allocates no channel
	latest  *latestCache   // owned by the writer goroutine
	queue   *queue         // the outbox's lanes and claims
	control control        // the routes' states
	space   space

	// Guarded by expiring, which one Expire at a time holds: the index
	// key the next pass reads from, and when a pass last read from the
	// beginning.
	expiring      sync.Mutex
	expireFrom    []byte
	expireRewound time.Time

	memTableSize int64                   // Badger's default when 0; tests shrink it to force batch splits
	vlogFileSize int64                   // vlogFileSize when 0; tests shrink it so that a few payloads fill a file
	commitTxn    func(*badger.Txn) error // Txn.Commit; tests make it fail as a disk does
	// vlogSyncErr is a failed sync of the value log during the last
	// commit, which Badger only logs: see badgerLogger.
	vlogSyncErr atomic.Pointer[error]
}

// New returns a store for the Badger directory path with default settings.
// Change the fields before Open.
func New(path string) *Store {
	return &Store{
		Path:           path,
		ReceiptTTL:     DefaultReceiptTTL,
		ExpiryInterval: DefaultExpiryInterval,
		GCInterval:     DefaultGCInterval,
		MaxBatch:       DefaultMaxBatch,
		Logger:         zap.NewNop(),
		Now:            time.Now,
		commitTxn:      (*badger.Txn).Commit,
		closing:        make(chan struct{}),
		failed:         make(chan struct{}),
		notify:         make(chan struct{}, 1),
		committed:      make(chan struct{}, 1),
	}
}

// Open opens Badger and starts the writer and the value-log GC.
func (s *Store) Open() error {
	if s.Path == "" {
		return errors.New("store: path required")
	}
	if s.ReceiptTTL < time.Second {
		return errors.New("store: receipt TTL must be at least 1s (Badger expires keys by the second)")
	}
	opts := s.badgerOptions()
	if err := s.openSpace(opts); err != nil {
		return err
	}
	db, err := openBadger(opts)
	if err != nil {
		return &webhookd.Error{Code: webhookd.EUNAVAILABLE, Message: "open store " + s.Path, Err: err}
	}
	s.db = db
	if s.nextSeq, err = s.lastSeq(); err != nil {
		db.Close()
		return fmt.Errorf("read outbox position: %w", err)
	}
	s.nextSeq++
	s.queue = newQueue()
	if err := s.loadQueue(); err != nil {
		db.Close()
		return fmt.Errorf("read outbox: %w", err)
	}
	if err := s.loadControl(); err != nil {
		db.Close()
		return fmt.Errorf("read paused routes: %w", err)
	}
	s.latest = newLatestCache(latestCacheSize)
	s.ops = make(chan *op, s.MaxBatch)
	s.wg.Add(5)
	go s.watchSpace()
	go s.write()
	go s.every(s.ExpiryInterval, s.expire)
	go s.every(s.GCInterval, s.RunGC)
	go s.adviseLogs()
	return nil
}

// valueThreshold is the size from which Badger keeps a value in its value
// log rather than in its LSM tree. A value there is written once and not
// moved again by compactions, which rewrite only its key and pointer.
//
// Payloads go there, and so do receipts but the smallest (a receipt takes
// about 100 to 220 bytes: a fingerprint, two times, the IDs, resource and
// version, each route's status). Receipts are keyed by request ID, which
// providers often draw at random: new ones then fall among the keys of
// every level, and each compaction rewrites every table their range
// overlaps, so with the receipts in the tree compactions rather than
// decisions set intake's rate as the data grows. Bodies in the tree would
// likewise be rewritten level after level while a backlog waits. Latest
// versions (20 to 50 bytes), forward statuses and the index keys' route
// names stay in the tree, where rewriting one leaves no value-log garbage;
// so does outbox metadata (70 to 150 bytes) unless long IDs and names
// take it over.
const valueThreshold = 128

// vlogFileSize is the size of a value-log file. Value-log GC never
// rewrites the file being written, so smaller files give an expired
// payload's space back sooner, at a rewrite of at most 64 MiB.
const vlogFileSize = 64 << 20

// badgerOptions returns the options the store opens Badger with.
func (s *Store) badgerOptions() badger.Options {
	opts := badger.DefaultOptions(s.Path).
		// A 2xx tells the provider to stop retrying: it may only be sent once the decision is on disk.
		WithSyncWrites(true).
		// All writes go through one writer goroutine, so there is nothing to detect.
		WithDetectConflicts(false).
		// Compactions share the cores with the request path and the disk
		// with the commits' syncs: more of them than cores lengthened
		// commit stalls on the bench without compacting faster. Badger
		// needs two at least and defaults to four.
		WithNumCompactors(max(2, min(4, runtime.GOMAXPROCS(0)))).
		// Level 0 takes ten tables before they are compacted into the
		// next level (Badger's default is five), so that each compaction
		// rewrites that level's overlapping tables for twice the new
		// data: intake held its rate as the data grew, with fewer stalls.
		// A read checks the bloom filters of more tables, which misses,
		// new request IDs, pass cheaply.
		WithNumLevelZeroTables(10).
		WithNumLevelZeroTablesStall(20).
		// Values of valueThreshold bytes or more, receipts and bodies, go
		// to the value log; the LSM tree keeps their keys and pointers.
		WithValueThreshold(valueThreshold).
		WithValueLogFileSize(cmp.Or(s.vlogFileSize, vlogFileSize)).
		WithLogger(badgerLogger{SugaredLogger: s.Logger.Sugar(), vlogSyncErr: &s.vlogSyncErr})
	memTable, multiplier := tableSizes(s.MemoryLimit)
	opts = opts.WithMemTableSize(memTable)
	opts.TableSizeMultiplier = multiplier // no With method for it
	if s.memTableSize > 0 {
		opts = opts.WithMemTableSize(s.memTableSize)
	}
	if s.MemoryLimit > 0 {
		s.Logger.Info("badger sized from the soft memory limit", zap.Int64("memory_limit_bytes", s.MemoryLimit),
			zap.Int64("memtable_bytes", opts.MemTableSize), zap.Int("table_size_multiplier", opts.TableSizeMultiplier))
	}
	return opts
}

// Close stops taking operations, applies those already submitted, stops the
// goroutines and closes Badger. It returns the first error.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed || s.db == nil {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.closing)
	s.wg.Wait()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close badger: %w", err)
	}
	return nil
}

// Ready reports whether the store takes new decisions.
func (s *Store) Ready() error {
	if err := s.readable(); err != nil {
		return err
	}
	return s.space.refusal()
}

// readable reports whether the store answers reads.
func (s *Store) readable() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.db == nil || s.db.IsClosed() {
		return ErrClosed
	}
	if err := s.failure.Load(); err != nil {
		return err
	}
	return nil
}

// Failed is closed when a commit fails. Badger applies a batch to its
// memtable before it syncs it, so after a failed sync it answers reads
// with writes the disk may not have: a redelivery would be answered
// "duplicate" from a receipt a crash could still lose. From then on the
// store refuses every operation, and only opening it again, which reads
// what the disk has, brings it back.
func (s *Store) Failed() <-chan struct{} { return s.failed }

// fail records the first failed commit. It runs in the writer, so it must
// not take mu: a submitter blocked on a full queue holds it.
func (s *Store) fail(err error) {
	s.failOnce.Do(func() {
		s.failure.Store(&webhookd.Error{Code: webhookd.EUNAVAILABLE, Message: "store failed to write, and takes nothing until webhookd starts again", Err: err})
		close(s.failed)
	})
}

// op is one unit of work for the writer. stage reads through the batch's
// transaction and stages its writes on t; the writer applies them only if
// stage returns nil.
type op struct {
	stage func(t *tx) error
	done  chan error
}

// update runs stage in the writer's next batch and waits until that batch is
// synced to disk.
func (s *Store) update(stage func(t *tx) error) error {
	o, _ := s.opPool.Get().(*op)
	if o == nil {
		o = &op{done: make(chan error, 1)}
	}
	o.stage = stage
	s.mu.RLock()
	if s.closed || s.db == nil {
		s.mu.RUnlock()
		return ErrClosed
	}
	if err := s.failure.Load(); err != nil {
		s.mu.RUnlock()
		return err
	}
	s.ops <- o
	s.mu.RUnlock()
	err := <-o.done
	// The writer answers an op once, and is done with it by then.
	o.stage = nil
	s.opPool.Put(o)
	return err
}

// view runs fn in a read-only transaction.
func (s *Store) view(fn func(txn *badger.Txn) error) error {
	if err := s.readable(); err != nil {
		return err
	}
	if err := s.db.View(fn); err != nil {
		return unavailable(err)
	}
	// A commit that failed while fn read may have shown it writes the disk
	// lacks.
	if err := s.failure.Load(); err != nil {
		return err
	}
	return nil
}

func (s *Store) write() {
	defer s.wg.Done()
	batch := make([]*op, 0, s.MaxBatch)
	for {
		select {
		case o := <-s.ops:
			batch = append(batch[:0], o)
			batch = s.drain(batch)
			s.apply(batch)
		case <-s.closing:
			// Close waited for submitters, so what is queued now is all there is.
			for len(s.ops) > 0 {
				s.apply(s.drain(batch[:0]))
			}
			return
		}
	}
}

// drain adds the operations already waiting, up to MaxBatch: while one batch
// syncs, the next one gathers.
func (s *Store) drain(batch []*op) []*op {
	for len(batch) < s.MaxBatch {
		select {
		case o := <-s.ops:
			batch = append(batch, o)
		default:
			return batch
		}
	}
	return batch
}

func (s *Store) apply(ops []*op) {
	for len(ops) > 0 {
		ops = ops[s.commit(ops):]
	}
}

// commit stages ops in one transaction until one does not fit, commits the
// ones that do, answers them and returns how many it answered.
func (s *Store) commit(ops []*op) int {
	if err := s.failure.Load(); err != nil { // ops queued before it failed
		for _, o := range ops {
			o.done <- err
		}
		return len(ops)
	}
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	s.latest.discard() // what a split batch staged before it was split
	errs := make([]error, len(ops))
	var changes []change // to the queue
	// Nothing holds the last batch's writes now: its transaction is
	// discarded.
	clear(s.staged)
	s.staged = s.staged[:0]
	t := &tx{txn: txn, now: s.Now(), seq: &s.nextSeq, latest: s.latest, staged: &s.staged}
	for i, o := range ops {
		t.reset()
		if errs[i] = o.stage(t); errs[i] != nil {
			continue
		}
		if err := t.flush(); err != nil {
			// The transaction now holds part of o's writes: start again
			// without o, which then fails alone, at the head of the next
			// commit, unless it only did not fit beside the ones before it.
			txn.Discard()
			if i > 0 {
				return s.commit(ops[:i])
			}
			if errors.Is(err, badger.ErrTxnTooBig) {
				err = errTooBig
			}
			o.done <- unavailable(err)
			return 1
		}
		changes = append(changes, t.changes...)
	}
	commitErr := s.commitTxn(txn)
	if err := s.vlogSyncErr.Swap(nil); err != nil && commitErr == nil {
		commitErr = *err
	}
	if commitErr != nil {
		s.fail(commitErr) // first: reads must stop before anything can block
		s.Logger.Error("commit batch; the store takes nothing more until it is opened again", zap.Int("ops", len(ops)), zap.Error(commitErr))
		commitErr = unavailable(commitErr)
		// Badger may have applied part of the failed batch: keep nothing of
		// it in memory either. The queue is not told of it, and refuses
		// claims from now on.
		s.latest.reset()
	} else {
		s.latest.committed()
		// Before the ops are answered: a settled claim's lane moves on
		// by the time Settle returns.
		s.queue.apply(changes)
		signal(s.committed)
		if len(changes) > 0 {
			signal(s.notify)
		}
	}
	for i, o := range ops {
		if errs[i] == nil {
			errs[i] = commitErr
		}
		o.done <- errs[i]
	}
	return len(ops)
}

// signal wakes the goroutine waiting on c, unless a signal already waits:
// one is enough.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// every runs fn every d until the store closes.
func (s *Store) every(d time.Duration, fn func()) {
	defer s.wg.Done()
	ticker := time.NewTicker(d)
	defer ticker.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-ticker.C:
			fn()
		}
	}
}

// Sizes returns Badger's own sizes of its LSM tree and value log: the
// apparent sizes of its table and value-log files, as Badger last measured
// them (once a minute). Allocated is the disk the store takes.
func (s *Store) Sizes() (lsm, vlog int64) { return s.db.Size() }

// RunGC rewrites value-log files until none is worth rewriting: a file is
// rewritten once half of it is values whose keys are gone, deleted or
// expired. Badger learns which are gone when a compaction drops their keys,
// and compactions follow writes, so an expired payload gives its space back
// after the writes that follow its expiry, and never while it is in the
// file being written. Values below the value threshold (receipts, outbox
// entries, small bodies) are dropped by the compactions themselves.
func (s *Store) RunGC() {
	for s.db.RunValueLogGC(0.5) == nil {
	}
}

// lastSeq returns the highest outbox position in use, or 0.
func (s *Store) lastSeq() (uint64, error) {
	var seq uint64
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Reverse: true, Prefix: []byte{prefixOutbox}})
		defer it.Close()
		it.Seek([]byte{prefixOutbox, 0xff})
		if it.Valid() {
			seq = binary.BigEndian.Uint64(it.Item().Key()[1:])
		}
		return nil
	})
	return seq, err
}

// tx is one operation's view of the batch transaction: reads go straight
// through (seeing earlier operations' writes), writes wait in the op until
// it has finished without error.
type tx struct {
	txn          *badger.Txn
	now          time.Time    // the store's clock when the transaction began
	seq          *uint64      // the writer's; nil in read-only transactions
	latest       *latestCache // the writer's; nil in read-only transactions
	writes       []badger.Entry
	staged       *[]badger.Entry // the batch's, which flush adds writes to
	dels         [][]byte
	changes      []change // to the queue, once the batch has committed
	latestWrites []latestWrite
}

// reader returns a read-only tx on txn.
func (s *Store) reader(txn *badger.Txn) *tx { return &tx{txn: txn, now: s.Now()} }

type latestWrite struct {
	key    string
	latest versioning.Latest
}

// get decodes the value at key into v, a zero value. It reports false
// when the key is absent or expired.
func (t *tx) get(key []byte, v any) (found bool, err error) {
	item, err := t.item(key)
	if err != nil || item == nil {
		return false, err
	}
	if err := item.Value(func(b []byte) error { return decode(b, v) }); err != nil {
		return false, fmt.Errorf("decode %q: %w", key, err)
	}
	return true, nil
}

// exists reports whether key is present and unexpired, without reading its value.
func (t *tx) exists(key []byte) (bool, error) {
	item, err := t.item(key)
	return item != nil, err
}

// getRaw returns a copy of the value at key, or nil when it is absent.
func (t *tx) getRaw(key []byte) ([]byte, error) {
	item, err := t.item(key)
	if err != nil || item == nil {
		return nil, err
	}
	return item.ValueCopy(nil)
}

// item returns the item at key, or nil when it is absent or expired by the
// store's clock.
func (t *tx) item(key []byte) (*badger.Item, error) {
	item, err := t.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	if exp := item.ExpiresAt(); exp != 0 && exp <= uint64(t.now.Unix()) {
		return nil, nil
	}
	return item, nil
}

// set stages the stored form of v at key; expiresAt is a Unix time in seconds, 0 for never.
func (t *tx) set(key []byte, v any, expiresAt uint64) error {
	b, err := encode(v)
	if err != nil {
		return fmt.Errorf("encode %q: %w", key, err)
	}
	t.setRaw(key, b, expiresAt)
	return nil
}

func (t *tx) setRaw(key, value []byte, expiresAt uint64) {
	t.writes = append(t.writes, badger.Entry{Key: key, Value: value, ExpiresAt: expiresAt})
}

// reset empties what t stages, for the batch's next operation: one tx and
// its slices serve every operation of a batch.
func (t *tx) reset() {
	clear(t.writes)
	clear(t.dels)
	clear(t.changes)
	clear(t.latestWrites)
	t.writes, t.dels, t.changes, t.latestWrites = t.writes[:0], t.dels[:0], t.changes[:0], t.latestWrites[:0]
}

func (t *tx) delete(key []byte) { t.dels = append(t.dels, key) }

// nextSeq hands out the next outbox position. Positions of an op that is
// staged again after a split are skipped, which leaves gaps but keeps order.
func (t *tx) nextSeq() uint64 {
	n := *t.seq
	*t.seq++
	return n
}

func (t *tx) flush() error {
	// Badger keeps a pointer to each entry until the transaction ends,
	// and changes it: each gets its own place in the batch's slice, whose
	// earlier arrays, when it grows, nothing writes again.
	for _, e := range t.writes {
		*t.staged = append(*t.staged, e)
		if err := t.txn.SetEntry(&(*t.staged)[len(*t.staged)-1]); err != nil {
			return err
		}
	}
	for _, k := range t.dels {
		if err := t.txn.Delete(k); err != nil {
			return err
		}
	}
	for _, w := range t.latestWrites {
		t.latest.stage(w.key, w.latest)
	}
	return nil
}

// getLatest returns the latest accepted version of source's resource, and
// whether there is one. Writer only: it reads through the writer's cache.
func (t *tx) getLatest(source, resource string) (versioning.Latest, bool, error) {
	key := latestKey(source, resource)
	if l, ok := t.latest.get(string(key)); ok {
		return l, true, nil
	}
	var l versioning.Latest
	found, err := t.get(key, &l)
	if found && err == nil {
		// Not staged by this batch, so what Badger has is committed.
		t.latest.put(string(key), l)
	}
	return l, found, err
}

// setLatest stages l as the latest accepted version of source's resource.
func (t *tx) setLatest(source, resource string, l versioning.Latest) error {
	key := latestKey(source, resource)
	if err := t.set(key, &l, 0); err != nil {
		return err
	}
	t.latestWrites = append(t.latestWrites, latestWrite{key: string(key), latest: l})
	return nil
}

func unavailable(err error) error {
	var e *webhookd.Error
	if errors.As(err, &e) {
		return err
	}
	return &webhookd.Error{Code: webhookd.EUNAVAILABLE, Message: "storage unavailable", Err: err}
}

// badgerLogger sends Badger's logs to zap. Badger's info lines describe its
// housekeeping, so they go out at debug level.
//
// Badger writes a value of valueThreshold bytes or more (a receipt or a
// body) to its value log, not to the memtable's log, and when syncing the
// value log fails it logs the error and commits all the same: the commit's
// keys would then point at a receipt or payload a crash can lose. The
// logger hands that error to the commit, which Badger has not yet
// returned, so the batch fails as any failed sync does.
type badgerLogger struct {
	*zap.SugaredLogger
	vlogSyncErr *atomic.Pointer[error]
}

// vlogSyncFailed is how Badger's value log reports a failed sync.
const vlogSyncFailed = "Error while curlf sync"

func (l badgerLogger) Errorf(f string, a ...any) {
	if strings.HasPrefix(f, vlogSyncFailed) {
		err := errors.New(strings.TrimSpace(fmt.Sprintf(f, a...)))
		l.vlogSyncErr.Store(&err)
	}
	l.SugaredLogger.Errorf(f, a...)
}
func (l badgerLogger) Warningf(f string, a ...any) { l.SugaredLogger.Warnf(f, a...) }
func (l badgerLogger) Infof(f string, a ...any)    { l.SugaredLogger.Debugf(f, a...) }
func (l badgerLogger) Debugf(f string, a ...any)   { l.SugaredLogger.Debugf(f, a...) }
