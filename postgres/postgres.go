package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/internal/ratelog"
	"github.com/webhookd/webhookd/storage"
)

// Defaults for Store's fields.
const (
	DefaultPoolSize         = 8
	DefaultStatementTimeout = 5 * time.Second
	DefaultReceiptTTL       = 168 * time.Hour
	DefaultMaxBatch         = 512
	DefaultBatchDelay       = 2 * time.Millisecond
	DefaultPollInterval     = 100 * time.Millisecond
	DefaultExpiryInterval   = time.Minute
	DefaultExpiryBatch      = 1000
	DefaultHealthInterval   = time.Second
	DefaultFoldInterval     = time.Second
	DefaultVacuumInterval   = 10 * time.Second
)

// maxDecisionTimeouts is how many decision batches in a row may time out
// before Ready says the store takes no deliveries: one is a slow moment,
// three are a lock or a stalled database, which a ping does not see.
const maxDecisionTimeouts = 3

// MaxBody is the largest body the store takes. PostgreSQL takes a bytea up
// to 1 GiB; a body is sent in one message and held in memory on both sides.
const MaxBody = 64 << 20

// ErrClosed is returned for operations submitted after Close.
var ErrClosed = &webhookd.Error{Code: webhookd.EUNAVAILABLE, Message: "store is closed"}

// Store satisfies the storage contract.
var _ storage.Backend = (*Store)(nil)

// Store is the PostgreSQL-backed receipt, version and outbox store. Any
// number of Stores, in any number of processes, may share one database.
type Store struct {
	DSN              string
	PoolSize         int
	StatementTimeout time.Duration
	ReceiptTTL       time.Duration
	MaxBatch         int
	// BatchDelay is how long a busy writer waits for more operations
	// before it writes a batch (collect).
	BatchDelay time.Duration
	// PollInterval is how often Notify fires without a local commit, so
	// that the forwarder finds entries other replicas accepted or whose
	// lease ended.
	PollInterval   time.Duration
	ExpiryInterval time.Duration // how often expired receipts and payloads are deleted
	ExpiryBatch    int           // rows deleted per statement
	HealthInterval time.Duration // how often an idle store checks the database answers
	FoldInterval   time.Duration // how often the count rows are folded (Fold)
	// VacuumInterval is how often the store looks whether the outbox
	// needs the VACUUM it runs itself when autovacuum leaves it alone.
	VacuumInterval time.Duration
	Logger         *zap.Logger
	// Now is the store's clock: what has expired, what is due, when a lease
	// ends. Replicas compare leases by their own clocks, which must agree
	// to well within a lease.
	Now func() time.Time

	pool      *pgxpool.Pool
	decisions chan *decideOp
	settles   chan *settleOp
	notify    chan struct{}
	health    atomic.Pointer[webhookd.Error] // nil while the database answers
	timeouts  atomic.Int32                   // decision batches in a row that timed out
	decideLog *ratelog.Failures              // failed decision batches
	settleLog *ratelog.Failures              // failed settle batches
	foldLog   *ratelog.Failures              // failed folds
	vacuumLog *ratelog.Failures              // failed vacuums of the outbox
	afterFold func(context.Context) error    // vacuumCountsAfterFold or noVacuum
	mu        sync.RWMutex                   // guards closed against submitters racing Close
	closed    bool
	closing   chan struct{}
	wg        sync.WaitGroup
	never     chan struct{} // Failed's: this store does not stop on a failed write

	commit func(context.Context, pgx.Tx) error // Tx.Commit; tests make it fail as a lost database does
}

// New returns a store for the database at dsn with default settings.
// Change the fields before Open.
func New(dsn string) *Store {
	return &Store{
		DSN:              dsn,
		PoolSize:         DefaultPoolSize,
		StatementTimeout: DefaultStatementTimeout,
		ReceiptTTL:       DefaultReceiptTTL,
		MaxBatch:         DefaultMaxBatch,
		BatchDelay:       DefaultBatchDelay,
		PollInterval:     DefaultPollInterval,
		ExpiryInterval:   DefaultExpiryInterval,
		ExpiryBatch:      DefaultExpiryBatch,
		HealthInterval:   DefaultHealthInterval,
		FoldInterval:     DefaultFoldInterval,
		VacuumInterval:   DefaultVacuumInterval,
		Logger:           zap.NewNop(),
		Now:              time.Now,
		afterFold:        noVacuum,
		notify:           make(chan struct{}, 1),
		closing:          make(chan struct{}),
		never:            make(chan struct{}),
		commit:           func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
	}
}

// inTx runs fn in a transaction and commits it.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		return err
	}
	return s.commit(ctx, tx)
}

// begin starts a transaction. A pooled connection the database closed
// while it sat idle (a restart, a terminated backend, an idle timeout)
// fails at BEGIN, before anything is asked of it: the pool then drops
// every idle connection, which the same event closed as well, and BEGIN is
// tried once more on a new one, so that no batch fails for it.
func (s *Store) begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := s.pool.Begin(ctx)
	var connect *pgconn.ConnectError
	if err != nil && lostConnection(err) && !errors.As(err, &connect) {
		s.pool.Reset()
		tx, err = s.pool.Begin(ctx)
	}
	return tx, err
}

// Open connects, brings the schema up to date and starts the writers and
// the expiry job. Its errors name storage.dsn when the database cannot be
// reached or refuses webhookd.
func (s *Store) Open(ctx context.Context) error {
	cfg, err := parseDSN(s.DSN)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(s.PoolSize)
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	params := cfg.ConnConfig.RuntimeParams
	if _, ok := params["application_name"]; !ok {
		params["application_name"] = "webhookd"
	}
	params["statement_timeout"] = strconv.FormatInt(s.StatementTimeout.Milliseconds(), 10)
	// Every statement is planned for the table as it is when it runs. A
	// prepared statement's cached generic plan keeps the table sizes of the
	// moment it was made: made while the tables were small and never made
	// again unless an ANALYZE or VACUUM touches them (autovacuum off), it
	// scans whole tables for what an index finds. Planning a batch's
	// statements costs far less than one such scan.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return &webhookd.Error{Code: webhookd.EINVALID, Field: "storage.dsn", Message: "not a usable PostgreSQL connection string", Err: err}
	}
	target := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return &webhookd.Error{Code: webhookd.EUNAVAILABLE, Field: "storage.dsn", Message: "cannot connect to PostgreSQL at " + target, Err: err}
	}
	ms, err := loadMigrations(migrations)
	if err != nil {
		pool.Close()
		return err
	}
	if err := migrate(ctx, pool, ms); err != nil {
		pool.Close()
		return &webhookd.Error{Code: webhookd.EUNAVAILABLE, Field: "storage.dsn", Message: "migrate the schema of " + target, Err: err}
	}
	s.pool = pool
	vacuums := s.vacuums(ctx)
	if slices.Contains(vacuums, "webhookd_counts") {
		s.afterFold = s.vacuumCountsAfterFold
	}
	s.decideLog = ratelog.New(s.Logger, zapcore.ErrorLevel, ratelog.DefaultEvery)
	s.settleLog = ratelog.New(s.Logger, zapcore.ErrorLevel, ratelog.DefaultEvery)
	s.foldLog = ratelog.New(s.Logger, zapcore.WarnLevel, ratelog.DefaultEvery)
	s.vacuumLog = ratelog.New(s.Logger, zapcore.WarnLevel, ratelog.DefaultEvery)
	s.decisions = make(chan *decideOp, s.MaxBatch)
	s.settles = make(chan *settleOp, s.MaxBatch)
	s.wg.Add(6)
	go s.every(s.FoldInterval, s.fold)
	if slices.Contains(vacuums, "webhookd_outbox") {
		s.wg.Add(1)
		go s.every(s.VacuumInterval, s.vacuumOutbox)
	}
	go s.decideLoop()
	go s.settleLoop()
	go s.every(s.ExpiryInterval, s.expire)
	go s.every(s.HealthInterval, s.checkHealth)
	go s.every(s.PollInterval, func() { signal(s.notify) })
	s.Logger.Info("postgres store open", zap.String("database", target), zap.Int("schema_version", len(ms)))
	return nil
}

// CheckDSN says whether dsn is a connection string Open can use, without
// connecting.
func CheckDSN(dsn string) error {
	_, err := parseDSN(dsn)
	return err
}

func parseDSN(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx quotes the connection string before what is wrong with it;
		// only the latter is shown, as a string it could not parse may
		// hold a password it could not find to hide.
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, "`: "); ok {
			msg = after
		}
		return nil, webhookd.FieldErrorf("storage.dsn", "not a usable PostgreSQL connection string: %s", msg)
	}
	return cfg, nil
}

// Close stops taking operations, applies those already submitted, stops
// the goroutines and closes the pool.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed || s.pool == nil {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.closing)
	s.wg.Wait()
	s.pool.Close()
	return nil
}

// errStuck is Ready's answer while decisions time out.
var errStuck = &webhookd.Error{Code: webhookd.EUNAVAILABLE,
	Message: "decisions time out: a lock or a stalled database holds them"}

// Ready reports whether the store takes deliveries: it is open, the
// database answered lately, and decisions complete: after
// maxDecisionTimeouts decision batches in a row timed out, it answers
// errStuck until a decision completes or a probe that takes the locks a
// decision takes does.
func (s *Store) Ready() error {
	if err := s.available(); err != nil {
		return err
	}
	if s.timeouts.Load() >= maxDecisionTimeouts {
		return errStuck
	}
	return nil
}

// available reports whether the store is open and the database answered
// lately: what reads, claims and repairs need.
func (s *Store) available() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.pool == nil {
		return ErrClosed
	}
	if err := s.health.Load(); err != nil {
		return err
	}
	return nil
}

// Failed is never closed: a failed write leaves nothing behind in this
// process, since the database is what every read asks, so the store goes
// on and answers 503 until the database is back.
func (s *Store) Failed() <-chan struct{} { return s.never }

// Notify is signalled after this store committed outbox entries or
// settled one, and every PollInterval besides, for what other replicas
// did.
func (s *Store) Notify() <-chan struct{} { return s.notify }

// every runs fn every d until Close.
func (s *Store) every(d time.Duration, fn func()) {
	defer s.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			fn()
		}
	}
}

// checkHealth pings the database, every HealthInterval, so that Ready
// follows it while no request comes. While decisions time out, it probes
// instead: a load balancer sends a replica that is not ready no
// deliveries, so the probe is what finds the lock gone.
func (s *Store) checkHealth() {
	if s.timeouts.Load() >= maxDecisionTimeouts {
		ctx, cancel := s.background()
		defer cancel()
		_, err := s.pool.Exec(ctx, probeDecision)
		s.observe(err)
		s.observeDecision(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.HealthInterval)
	defer cancel()
	s.observe(s.pool.Ping(ctx))
}

// observeDecision counts decision batches in a row that timed out, and
// logs when decisions stop and start completing.
func (s *Store) observeDecision(err error) {
	switch {
	case err == nil:
		if s.timeouts.Swap(0) >= maxDecisionTimeouts {
			s.Logger.Info("decisions complete again; ready")
		}
	case timedOut(err):
		if s.timeouts.Add(1) == maxDecisionTimeouts {
			s.Logger.Error("decisions time out: not ready until one completes", zap.Int("batches", maxDecisionTimeouts), zap.Error(err))
		}
	}
}

// timedOut says whether err is a statement that ran out of time: the
// statement or lock timeout, or the store's own deadline.
func timedOut(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "57014" || pgErr.Code == "55P03"
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// observe records whether the database answered. After a lost connection
// the pool drops its idle connections, which the same restart or network
// failure is likely to have closed, rather than fail one operation on each.
func (s *Store) observe(err error) {
	if err == nil {
		if s.health.Swap(nil) != nil {
			s.Logger.Info("database answers again")
		}
		return
	}
	if !unreachable(err) {
		return
	}
	if lostConnection(err) {
		s.pool.Reset()
	}
	e := &webhookd.Error{Code: webhookd.EUNAVAILABLE, Message: "database unavailable", Err: err}
	if s.health.Swap(e) == nil {
		s.Logger.Error("database unavailable; answering 503 until it is back", zap.Error(err))
	}
}

// unreachable says whether err means the database could not be asked, as
// opposed to refusing one statement.
func unreachable(err error) bool {
	if errors.Is(err, errConflict) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 57P: operator intervention
		// (shutdown, restart); 53: insufficient resources.
		c := pgErr.Code
		return c[:2] == "08" || c[:3] == "57P" || c[:2] == "53"
	}
	return true
}

// lostConnection says whether err may have closed the connection it came
// from, or others: the database unreachable, restarting, or the
// connection dropped. A deadline or a cancellation is the caller's.
func lostConnection(err error) bool {
	return unreachable(err) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// submit hands an operation to a writer, unless the store is closed.
func submit[T any](s *Store, ch chan T, o T) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed || s.pool == nil {
		return ErrClosed
	}
	ch <- o
	return nil
}

// signal wakes the goroutine waiting on c, unless a signal already waits.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// background is the context of the store's own statements, which serve
// many callers at once: each is bounded by the statement timeout.
func (s *Store) background() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*s.StatementTimeout+5*time.Second)
}

// unavailable classifies a database error for the caller: webhookd.Errors
// pass through, anything else answers 503.
func unavailable(err error) error {
	var e *webhookd.Error
	if errors.As(err, &e) {
		return err
	}
	return &webhookd.Error{Code: webhookd.EUNAVAILABLE, Message: "storage unavailable", Err: err}
}
