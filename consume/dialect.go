package consume

import (
	"fmt"
	"strings"
)

// Dialect selects the SQL of one database. Each has its own "insert if
// absent" statement, so that the primary key, not a read before the
// insert, decides which of two concurrent deliveries of a key applies.
type Dialect int

// The supported databases.
const (
	// PostgreSQL, through pgx's database/sql driver
	// (github.com/jackc/pgx/v5/stdlib).
	PostgreSQL Dialect = iota + 1
	// MySQL and MariaDB, through github.com/go-sql-driver/mysql.
	MySQL
	// SQLite, through modernc.org/sqlite. Writers take the database lock
	// in turn: open it with _txlock=immediate and a busy_timeout pragma so
	// that concurrent deliveries wait for it instead of failing.
	SQLite
)

// Rebind turns the ? placeholders of stmt into d's: $1, $2, … for
// PostgreSQL; the others take ? as they are. It is for the statements of
// an apply function written once for several databases. It does not parse
// SQL: a ? inside a string literal is replaced too.
func (d Dialect) Rebind(stmt string) string {
	if d != PostgreSQL {
		return stmt
	}
	var b strings.Builder
	n := 0
	for _, r := range stmt {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "postgresql"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// statements is the SQL one Consumer runs, built once from its dialect and
// table names.
type statements struct {
	schema    []string
	insertKey string // insert if absent; 1 row affected means new
	markStale string
	// upsertVersion makes a version the latest of its resource, if absent
	// or newer, in one statement: 1 row affected means it did. Where it is
	// empty (MySQL), insertVersion, lockVersion and updateVersion do it in
	// steps.
	upsertVersion string
	insertVersion string // insert if absent, locking an existing row
	lockVersion   string // the latest version's order and the key that set it
	updateVersion string
	lookup        string
	cleanKeys     string // one bounded batch
	cleanVersions string // one bounded batch
}

func newStatements(d Dialect, table string) (statements, error) {
	versions := table + "_versions"
	keyCols := "consumer, idempotency_key, source, route, resource, version, attempt, decision, processed_at"
	var s statements
	switch d {
	case PostgreSQL:
		s.schema = []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	consumer        text    NOT NULL,
	idempotency_key text    NOT NULL,
	source          text    NOT NULL,
	route           text    NOT NULL,
	resource        text    NOT NULL,
	version         text    NOT NULL,
	attempt         integer NOT NULL,
	decision        text    NOT NULL,
	processed_at    bigint  NOT NULL, -- microseconds since the Unix epoch
	PRIMARY KEY (consumer, idempotency_key)
)`,
			`CREATE INDEX IF NOT EXISTS ` + indexName(table) + ` ON ` + table + ` (processed_at)`,
			`CREATE TABLE IF NOT EXISTS ` + versions + ` (
	consumer   text   NOT NULL,
	source     text   NOT NULL,
	resource   text   NOT NULL,
	version    text   NOT NULL,
	ord        text   COLLATE "C" NOT NULL, -- the version's order key, 20 digits
	set_by     text   NOT NULL, -- the idempotency key that applied it
	applied_at bigint NOT NULL, -- microseconds since the Unix epoch
	PRIMARY KEY (consumer, source, resource)
)`,
			`CREATE INDEX IF NOT EXISTS ` + indexName(versions) + ` ON ` + versions + ` (applied_at)`,
		}
		s.insertKey = `INSERT INTO ` + table + ` (` + keyCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`
		s.markStale = `UPDATE ` + table + ` SET decision = $1 WHERE consumer = $2 AND idempotency_key = $3`
		// The conflict locks the existing row; the WHERE leaves an older
		// or equal version's row as it is, and then no row is affected.
		s.upsertVersion = `INSERT INTO ` + versions + ` AS cur (consumer, source, resource, version, ord, set_by, applied_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (consumer, source, resource) DO UPDATE SET version = EXCLUDED.version, ord = EXCLUDED.ord, set_by = EXCLUDED.set_by, applied_at = EXCLUDED.applied_at
WHERE cur.ord < EXCLUDED.ord`
		s.lookup = `SELECT ` + keyCols + ` FROM ` + table + ` WHERE consumer = $1 AND idempotency_key = $2`
		s.cleanKeys = `DELETE FROM ` + table + ` WHERE ctid IN (SELECT ctid FROM ` + table + ` WHERE processed_at < $1 LIMIT $2)`
		s.cleanVersions = `DELETE FROM ` + versions + ` WHERE ctid IN (SELECT ctid FROM ` + versions + ` WHERE applied_at < $1 LIMIT $2)`
	case MySQL:
		// utf8mb4_bin: the default collations compare case-insensitively,
		// which would make "abc" a duplicate of "ABC". The lengths are
		// MaxValue and MaxName, which keep each primary key within
		// InnoDB's 3072 bytes (4 a character).
		str := "VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"
		name := "VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"
		s.schema = []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	consumer        ` + str + `,
	idempotency_key ` + str + `,
	source          ` + name + `,
	route           ` + name + `,
	resource        ` + str + `,
	version         ` + str + `,
	attempt         INT NOT NULL,
	decision        VARCHAR(16) NOT NULL,
	processed_at    BIGINT NOT NULL COMMENT 'microseconds since the Unix epoch',
	PRIMARY KEY (consumer, idempotency_key),
	INDEX ` + indexName(table) + ` (processed_at)
) ENGINE=InnoDB`,
			`CREATE TABLE IF NOT EXISTS ` + versions + ` (
	consumer   ` + str + `,
	source     ` + name + `,
	resource   ` + str + `,
	version    ` + str + `,
	ord        CHAR(20) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the version''s order key, 20 digits',
	set_by     ` + str + ` COMMENT 'the idempotency key that applied it',
	applied_at BIGINT NOT NULL COMMENT 'microseconds since the Unix epoch',
	PRIMARY KEY (consumer, source, resource),
	INDEX ` + indexName(versions) + ` (applied_at)
) ENGINE=InnoDB`,
		}
		// INSERT IGNORE also turns other errors into warnings (a value too
		// long is truncated): New and the checks before each insert keep
		// every value within the columns, so only the duplicate remains.
		s.insertKey = `INSERT IGNORE INTO ` + table + ` (` + keyCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
		s.markStale = `UPDATE ` + table + ` SET decision = ? WHERE consumer = ? AND idempotency_key = ?`
		// Not INSERT IGNORE: on a duplicate it takes a shared lock, and two
		// transactions holding one both wait to update the row, a deadlock.
		// The no-op update takes the exclusive lock at once.
		// MySQL's upsert has no WHERE, and the rows it reports affected
		// depend on the connection's clientFoundRows: the stale check is
		// made in steps. Not INSERT IGNORE: on a duplicate it takes a
		// shared lock, and two transactions holding one both wait to
		// update the row, a deadlock. The no-op update takes the exclusive
		// lock at once.
		s.insertVersion = `INSERT INTO ` + versions + ` (consumer, source, resource, version, ord, set_by, applied_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE consumer = consumer`
		s.lockVersion = `SELECT ord, set_by FROM ` + versions + ` WHERE consumer = ? AND source = ? AND resource = ? FOR UPDATE`
		s.updateVersion = `UPDATE ` + versions + ` SET version = ?, ord = ?, set_by = ?, applied_at = ? WHERE consumer = ? AND source = ? AND resource = ?`
		s.lookup = `SELECT ` + keyCols + ` FROM ` + table + ` WHERE consumer = ? AND idempotency_key = ?`
		s.cleanKeys = `DELETE FROM ` + table + ` WHERE processed_at < ? ORDER BY processed_at LIMIT ?`
		s.cleanVersions = `DELETE FROM ` + versions + ` WHERE applied_at < ? ORDER BY applied_at LIMIT ?`
	case SQLite:
		s.schema = []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	consumer        TEXT    NOT NULL,
	idempotency_key TEXT    NOT NULL,
	source          TEXT    NOT NULL,
	route           TEXT    NOT NULL,
	resource        TEXT    NOT NULL,
	version         TEXT    NOT NULL,
	attempt         INTEGER NOT NULL,
	decision        TEXT    NOT NULL,
	processed_at    INTEGER NOT NULL, -- microseconds since the Unix epoch
	PRIMARY KEY (consumer, idempotency_key)
)`,
			`CREATE INDEX IF NOT EXISTS ` + indexName(table) + ` ON ` + table + ` (processed_at)`,
			`CREATE TABLE IF NOT EXISTS ` + versions + ` (
	consumer   TEXT    NOT NULL,
	source     TEXT    NOT NULL,
	resource   TEXT    NOT NULL,
	version    TEXT    NOT NULL,
	ord        TEXT    NOT NULL, -- the version's order key, 20 digits
	set_by     TEXT    NOT NULL, -- the idempotency key that applied it
	applied_at INTEGER NOT NULL, -- microseconds since the Unix epoch
	PRIMARY KEY (consumer, source, resource)
)`,
			`CREATE INDEX IF NOT EXISTS ` + indexName(versions) + ` ON ` + versions + ` (applied_at)`,
		}
		s.insertKey = `INSERT INTO ` + table + ` (` + keyCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
		s.markStale = `UPDATE ` + table + ` SET decision = ? WHERE consumer = ? AND idempotency_key = ?`
		// Unqualified columns in the WHERE are the existing row's.
		s.upsertVersion = `INSERT INTO ` + versions + ` (consumer, source, resource, version, ord, set_by, applied_at) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (consumer, source, resource) DO UPDATE SET version = excluded.version, ord = excluded.ord, set_by = excluded.set_by, applied_at = excluded.applied_at
WHERE ord < excluded.ord`
		s.lookup = `SELECT ` + keyCols + ` FROM ` + table + ` WHERE consumer = ? AND idempotency_key = ?`
		s.cleanKeys = `DELETE FROM ` + table + ` WHERE rowid IN (SELECT rowid FROM ` + table + ` WHERE processed_at < ? LIMIT ?)`
		s.cleanVersions = `DELETE FROM ` + versions + ` WHERE rowid IN (SELECT rowid FROM ` + versions + ` WHERE applied_at < ? LIMIT ?)`
	default:
		return statements{}, fmt.Errorf("consume: unknown dialect %v", d)
	}
	return s, nil
}

// indexName names a table's time index; a schema-qualified table gives
// its index the table's bare name, which PostgreSQL places in the table's
// schema.
func indexName(table string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		table = table[i+1:]
	}
	return table + "_time"
}
