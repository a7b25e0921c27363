// Package postgres is the storage backend for several webhookd replicas on
// one PostgreSQL database. It keeps every promise the Badger store keeps
// (one accept per request ID, no version regression, per-resource
// forwarding order, nothing acknowledged lost) across processes, with the
// same pure rules (dedupe.Decide, forward.Apply and the repair checks), and
// no session state a pooler in transaction mode would lose: no LISTEN/NOTIFY,
// no advisory locks, settings only for one transaction (SET LOCAL, or
// set_config's local form). The claim and three of a decision's writes
// are prepared statements on each connection: such a pooler needs to
// carry prepared statements (PgBouncer's max_prepared_statements). The
// outbox VACUUM webhookd runs itself where autovacuum leaves the outbox
// alone (vacuum.go) opens a connection of its own with no statement
// timeout, outside the pool, and closes it after.
//
// It is a package of its own, named after its engine, beside the Badger
// store (package store) rather than under it: neither backend imports the
// other, and both answer to the same conformance suite (store/storetest).
//
// Decisions group-commit. One writer goroutine takes the deliveries
// waiting, reads the receipt of each request ID, then the latest version
// dedupe.LatestFor names for each, plans each delivery in arrival order over
// what the ones before it planned (a later one sees the earlier ones, as
// in the Badger store), and writes every table in one statement over
// arrays, then commits. It acknowledges only after the commit. No row is
// locked while planning: each write is conditional on what the batch read
// (a new receipt only where none is live, a held receipt only if its
// attempts are unchanged, a latest version only from the one read and only
// forward), so a batch that raced another replica's writes affects fewer
// rows than planned, rolls back, and is planned again from a fresh read.
// Rows are written in key order, table by table, so that two replicas'
// transactions never wait on each other in a cycle.
//
// The outbox is a table with an entry for each route an accepted delivery
// matched, written in the decision's transaction; the routes' entries of
// one request share its one payload row. A lane is the entries of one
// (source, route, resource) in seq order, and a claim takes the due lane
// heads of one target (source, route), so a route's backlog or dead
// letters hold up nothing of another's. The due index holds only the
// entries marked head (a lane's first, marked when it is inserted into
// an empty lane or when the entries before it are deleted), so a claim
// walks no entry waiting behind a head, however many wait; it still
// checks each lane, as a mark may be set in doubt. A claim leases heads
// with FOR NO KEY UPDATE SKIP LOCKED and a lease token from a sequence;
// a settle applies only while the entry carries its token, and a repeat
// is known by the token the settle left on the entry, its route's status
// on the receipt, or the dead letter. Settles group-commit as decisions
// do: a batch locks its receipts in key order, then settles each move's
// claims (remove, reschedule, bury) in one statement over arrays, which
// reports the entries whose claims still held them. Notify fires after
// local commits and every PollInterval, for what other replicas did.
//
// A receipt's forward status per route is a jsonb object in the
// receipt's own row (routes), keyed by route name with the route's
// position in the source's order. A receipt and its statuses are then
// written, replaced over an expired receipt, and expired as one row: a
// table of its own would leave statuses behind when a request ID is
// decided again over an expired receipt, and its expiry would delete by a
// join whose plan rests on statistics. A settle statement merges the
// statuses of the routes it settled into each receipt's object, one
// update a receipt however many of its routes the batch holds, keeping
// each route's position; it writes only the routes it settled, so
// concurrent settles of one receipt's routes keep each other's. Repairs,
// which hold the receipt locked, merge whole route statuses. Dead letters are keyed (source, route, request_id).
//
// Each route's send state (forward.RouteState: its pause, its breaker,
// its rate budget) is a row of webhookd_routes. Grant, Release and Report
// each lock the route's row (made first, with the zero state, for a route
// that has none), apply the pure rule of their name with the store's
// clock, and write the state back if it changed, in one transaction; Pause
// writes its one column. Every replica's calls on a route take turns on
// that row: N replicas draw on one token bucket, and one of them holds
// the probe of a half-open route. The bucket holds exactly at the
// database: over any T seconds a route's grants total at most Burst +
// Limit·T, whatever the number of replicas. The downstream sees that
// bound shifted by the time between a grant and its request starting (a
// claim, milliseconds) and by what the replicas' clocks disagree on: the
// bucket's time only moves forward, so a replica whose clock lags refills
// nothing and the leading clock sets the pace. Tokens granted and not used
// (fewer due entries than granted) are released; a replica that dies
// holding granted tokens loses them, which slows the route until the
// bucket refills and never speeds it. A call that changes nothing (a
// grant to a closed route without a rate) writes nothing; under a rate,
// each claim of each replica writes the route's row once.
//
// Lists page by keyset and opaque cursors (base64 of the JSON of the last
// key a page covered): the outbox by seq, dead letters by their key.
// Receipts are searched newest first by an index on first_seen, of every
// source or of one (first_seen, source, request_id descending); one
// statement walks at most storage.MaxExamined receipts from the cursor,
// filters them (decision, resource, and each route's status in the routes
// object) and returns the first matches and the last receipt it read, the
// cursor of a page the filters left short. Bulk retries and discards take
// dead letters oldest accepted first by an index on created_at, a page a
// transaction: it locks the page's receipts, then its dead letters, then
// the latest versions its retries check, each set in key order, as a
// single repair does, and writes the page's entries and payloads as
// arrays.
//
// Times are the store's clock (Now), passed to every statement, never the
// database's: expiry and leases follow one clock, and tests move it by
// hand. PostgreSQL keeps microseconds, so Decide truncates a delivery's
// time to them. Version orders are unsigned 64-bit; they are stored with
// the top bit flipped, so that bigint order is their order.
//
// Statements are planned when they run, for the tables as they are then:
// they go as unnamed prepared statements, so no generic plan made while
// the tables were small outlives their growth, and a decision's lookups
// carry LIMIT 1, so that the planner cannot flatten them into a join it
// would run as a scan of the table. Two kinds are prepared on each
// connection, and keep a generic plan: the claim, planned generically in
// a transaction of its own (leaseHeads), as its generic plan is the
// ordered walk of the due index that stops at the limit; and the
// decision's writes that read no table (preparedWrites), whose plan is
// the same at any size. A list's page is planned with sorts disabled
// (withIndexOrder), so that it walks its index from the cursor and stops
// at its limit, where the planner, guessing few rows after the cursor on
// tables never analyzed, would fetch all of them and sort. webhookd's
// cost does not depend on whether or when its tables were analyzed, and
// it runs no ANALYZE. It vacuums the two tables whose speed depends on a
// VACUUM when autovacuum leaves them alone (vacuum.go): the outbox, which
// a claim walks past the index entries of rows deleted since its last
// VACUUM, and the count rows; Open warns once of the other tables
// autovacuum leaves alone.
//
// Pending and DeadLetterCounts add up webhookd_counts, rows that
// statement triggers on the outbox and the dead letters insert for each
// target a statement changes, and that every replica folds into one a
// target every FoldInterval (foldCounts), so a count costs the same
// whatever the number of entries it counts.
//
// Ready follows the database (a ping every HealthInterval) and the
// decisions: after three batches in a row time out (a lock held on a
// table answers pings), it answers 503 until a decision, or a probe that
// takes the locks a decision takes, completes. A connection the database
// closed while pooled fails at BEGIN; the pool then drops its idle
// connections and the transaction begins on a new one.
//
// The schema is migrations/*.sql, embedded and applied at Open inside one
// transaction that holds the webhookd_schema row: replicas starting
// together take turns, and a database a newer build migrated is refused.
// Receipts and payloads past receipt_ttl read as absent and are deleted by
// a job every replica runs, in bounded batches that skip rows others hold.
package postgres
