// Package consume is the downstream half of webhookd's delivery promise:
// webhookd forwards each accepted webhook at least once, and a service
// that applies them through this package applies each exactly once,
// inside its own database transaction.
//
// The idempotency key is recorded in a processed-keys table in the same
// transaction as the service's effect, and the table's primary key, not a
// prior read, decides whether a delivery is new: two concurrent retries
// cannot both apply, a crash before the commit leaves neither the effect
// nor the key, and a crash after it leaves both. An optional stale guard
// keeps the latest applied version per (source, resource) and refuses
// older or equal ones. Effects outside the transaction (an e-mail, another
// HTTP call) are not covered: each Record says so.
//
// The package works over database/sql with PostgreSQL, MySQL/MariaDB and
// SQLite; it imports no driver, the service does. Its imports are
// net/http, database/sql and webhookd's signature and versioning
// packages, so a service pulls in nothing of the gateway.
//
// docs/consumer.md explains the pattern, the crash windows it closes and
// the retention that cleanup needs.
package consume
