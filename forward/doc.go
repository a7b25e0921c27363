// Package forward owns the outbox: the forward intent that the store writes
// in the same transaction as an accepted delivery's receipt, and the
// delivery of those entries to each source's downstream.
package forward
