package consume

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/webhookd/webhookd/signature"
	"github.com/webhookd/webhookd/versioning"
)

// DefaultTable is the processed-keys table's name when Config.Table is
// empty; the stale guard's table is its name with "_versions" appended.
const DefaultTable = "webhookd_processed"

// The longest values the tables hold, in bytes: MaxValue for a key,
// consumer, resource or version (webhookd's limit for request IDs,
// resources and versions), MaxName for a source or route (webhookd's
// names are at most 64).
const (
	MaxValue = 256
	MaxName  = 128
)

// DefaultMaxBody is the largest body the handler reads when
// Config.MaxBody is zero: GitHub's cap, the largest any webhookd source
// accepts by default.
const DefaultMaxBody = 25 << 20

// Config sets up a Consumer.
type Config struct {
	DB      *sql.DB
	Dialect Dialect
	// Table names the processed-keys table, optionally schema-qualified
	// ("billing.webhookd_processed"); DefaultTable when empty.
	Table string
	// Versions turns the stale guard on: the format of Webhook-Version
	// (the source's version_format in webhookd). Empty: no guard.
	Versions versioning.Format
	// Secrets, when set, make the handler verify the Standard Webhooks
	// signature that a webhookd route's sign adds; several allow rotation.
	Secrets []string
	// Tolerance is how far the signed timestamp may be from now;
	// signature.DefaultTolerance when zero.
	Tolerance time.Duration
	// MaxBody bounds the body the handler reads; DefaultMaxBody when zero.
	MaxBody int64
	// Log receives apply failures and panics; slog.Default() when nil.
	Log *slog.Logger
	// Now is the clock of the recorded times; time.Now when nil.
	Now func() time.Time
}

// Consumer applies deliveries exactly once. It is safe for concurrent use.
type Consumer struct {
	db       *sql.DB
	sql      statements
	versions versioning.Format
	verify   signature.Verifier // nil: no secrets
	maxBody  int64
	log      *slog.Logger
	now      func() time.Time
}

// ApplyFunc applies one delivery's effect with tx, the transaction that
// records its key. It must not commit or roll back tx. An error rolls
// everything back; mark it with Permanent when a retry cannot succeed.
type ApplyFunc func(ctx context.Context, tx *sql.Tx, d Delivery) error

// Delivery is one webhook (or message) to apply.
type Delivery struct {
	Key      string // Idempotency-Key: webhookd's request ID, or a message's business ID
	Source   string // Webhook-Source
	Route    string // Webhook-Route
	Resource string // Webhook-Resource, empty when the source has none
	Version  string // Webhook-Version, empty when the source has none
	Attempt  int    // Webhook-Attempt: 1, 2, …; 0 when unknown
	Body     []byte
	Header   http.Header // the request's headers; nil outside HTTP
}

// Decision is what became of a delivery.
type Decision string

// The decisions; the handler sends them in the Webhook-Decision header.
const (
	Applied   Decision = "applied"   // apply ran and committed with the key
	Duplicate Decision = "duplicate" // the key was already recorded: apply not called
	Stale     Decision = "stale"     // an equal or newer version was applied: apply not called, key recorded
)

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// New checks cfg and returns its Consumer. It does not touch the
// database: call CreateSchema, or run Schema's SQL in a migration.
func New(cfg Config) (*Consumer, error) {
	if cfg.DB == nil {
		return nil, errors.New("consume: Config.DB is nil")
	}
	table := cfg.Table
	if table == "" {
		table = DefaultTable
	}
	// The name is spliced into SQL: only plain identifiers.
	if !tableName.MatchString(table) || len(table) > 50 {
		return nil, fmt.Errorf("consume: table name %q: want letters, digits and underscores (schema.table allowed), at most 50", table)
	}
	stmts, err := newStatements(cfg.Dialect, table)
	if err != nil {
		return nil, err
	}
	switch cfg.Versions {
	case "", versioning.Integer, versioning.Timestamp:
	default:
		return nil, fmt.Errorf("consume: version format %q: want %q or %q", cfg.Versions, versioning.Integer, versioning.Timestamp)
	}
	c := &Consumer{db: cfg.DB, sql: stmts, versions: cfg.Versions, maxBody: cfg.MaxBody, log: cfg.Log, now: cfg.Now}
	if len(cfg.Secrets) > 0 {
		c.verify, err = signature.New(signature.Config{Scheme: signature.StandardWebhooks, Secrets: cfg.Secrets, Tolerance: cfg.Tolerance})
		if err != nil {
			return nil, fmt.Errorf("consume: %w", err)
		}
	}
	if c.maxBody == 0 {
		c.maxBody = DefaultMaxBody
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Schema returns the SQL that creates the tables, for teams that run
// their own migrations. It is idempotent (IF NOT EXISTS).
func (c *Consumer) Schema() string {
	return strings.Join(c.sql.schema, ";\n\n") + ";\n"
}

// CreateSchema creates the tables and indexes where they do not exist.
func (c *Consumer) CreateSchema(ctx context.Context) error {
	for _, stmt := range c.sql.schema {
		if _, err := c.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("consume: create schema: %w", err)
		}
	}
	return nil
}

// Apply applies d once for consumer: in one transaction it records
// (consumer, d.Key), runs the stale guard when configured and calls
// apply, then commits. A key already recorded returns Duplicate without
// calling apply; a version not newer than the latest applied one of
// (d.Source, d.Resource) for consumer returns Stale, and records the key.
// An error from apply, or a panic in it, rolls back: nothing is recorded,
// and the panic goes on. Several consumers of one message each apply it
// once: the primary key is (consumer, key).
func (c *Consumer) Apply(ctx context.Context, consumer string, d Delivery, apply ApplyFunc) (Decision, error) {
	if err := check(consumer, d); err != nil {
		return "", err
	}
	var order uint64
	guarded := c.versions != "" && d.Resource != "" && d.Version != ""
	if guarded {
		var err error
		if order, err = versioning.Parse(c.versions, d.Version); err != nil {
			return "", Permanent(fmt.Errorf("consume: version %q: %w", d.Version, err))
		}
	}
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("consume: begin: %w", err)
	}
	// Rolls back on every way out but the commit, a panic in apply too.
	committed := false
	defer func() {
		if !committed {
			tx.Rollback()
		}
	}()
	now := c.now().UnixMicro()
	res, err := tx.ExecContext(ctx, c.sql.insertKey, consumer, d.Key, d.Source, d.Route, d.Resource, d.Version, d.Attempt, string(Applied), now)
	if err != nil {
		return "", fmt.Errorf("consume: record key: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return "", fmt.Errorf("consume: record key: %w", err)
	} else if n == 0 {
		return Duplicate, nil
	}
	decision := Applied
	if guarded {
		newer, err := c.advance(ctx, tx, consumer, d, order, now)
		if err != nil {
			return "", err
		}
		if !newer {
			decision = Stale
			if _, err := tx.ExecContext(ctx, c.sql.markStale, string(Stale), consumer, d.Key); err != nil {
				return "", fmt.Errorf("consume: record stale: %w", err)
			}
		}
	}
	if decision == Applied {
		if err := apply(ctx, tx, d); err != nil {
			return "", err
		}
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("consume: commit: %w", err)
	}
	committed = true
	return decision, nil
}

// advance makes d's version the latest of its resource when it is the
// first or newer than the latest, and says whether it was. Versions
// compare by their order keys, written as 20 digits so that the
// database compares them as text.
func (c *Consumer) advance(ctx context.Context, tx *sql.Tx, consumer string, d Delivery, order uint64, now int64) (bool, error) {
	ord := fmt.Sprintf("%020d", order)
	if c.sql.upsertVersion != "" {
		res, err := tx.ExecContext(ctx, c.sql.upsertVersion, consumer, d.Source, d.Resource, d.Version, ord, d.Key, now)
		if err != nil {
			return false, fmt.Errorf("consume: record version: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return false, fmt.Errorf("consume: record version: %w", err)
		}
		return n == 1, nil
	}
	// In steps: the first version of a resource is inserted if absent, so
	// that two concurrent first versions meet on the primary key; then the
	// row is read locked. A row set by d's own key with d's version is the
	// one just inserted: the key is new in this transaction, so no earlier
	// one set it.
	if _, err := tx.ExecContext(ctx, c.sql.insertVersion, consumer, d.Source, d.Resource, d.Version, ord, d.Key, now); err != nil {
		return false, fmt.Errorf("consume: record version: %w", err)
	}
	var latest, setBy string
	if err := tx.QueryRowContext(ctx, c.sql.lockVersion, consumer, d.Source, d.Resource).Scan(&latest, &setBy); err != nil {
		return false, fmt.Errorf("consume: read version: %w", err)
	}
	if setBy == d.Key && latest == ord {
		return true, nil
	}
	if ord <= latest {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, c.sql.updateVersion, d.Version, ord, d.Key, now, consumer, d.Source, d.Resource); err != nil {
		return false, fmt.Errorf("consume: record version: %w", err)
	}
	return true, nil
}

// check refuses values the tables cannot hold as given: MySQL's INSERT
// IGNORE would truncate a long one into another key, and PostgreSQL
// refuses invalid UTF-8 and NUL.
func check(consumer string, d Delivery) error {
	if d.Key == "" {
		return Permanent(errors.New("consume: empty idempotency key"))
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"consumer", consumer, MaxValue}, {"key", d.Key, MaxValue}, {"source", d.Source, MaxName},
		{"route", d.Route, MaxName}, {"resource", d.Resource, MaxValue}, {"version", d.Version, MaxValue},
	} {
		if len(f.v) > f.max {
			return Permanent(fmt.Errorf("consume: %s is %d bytes, more than %d", f.name, len(f.v), f.max))
		}
		if !utf8.ValidString(f.v) || strings.IndexByte(f.v, 0) >= 0 {
			return Permanent(fmt.Errorf("consume: %s %q is not valid UTF-8 text", f.name, f.v))
		}
	}
	return nil
}

// permanent marks an error that a retry cannot cure.
type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
func (p *permanent) Unwrap() error { return p.err }

// Permanent marks err as one that a retry cannot cure (a malformed event,
// a reference to nothing): the handler answers it 422, which webhookd
// dead-letters at once instead of retrying. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanent{err}
}

// IsPermanent says whether err, or an error it wraps, was marked by
// Permanent.
func IsPermanent(err error) bool {
	var p *permanent
	return errors.As(err, &p)
}
