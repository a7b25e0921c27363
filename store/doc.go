// Package store is the one place that owns the Badger transaction. It
// applies the dedupe, versioning and forward rules to each delivery and
// writes the receipt, the resource's latest version and the outbox entry in
// ONE transaction, so that no crash can leave one without the others.
//
// Every write goes through a single writer goroutine that group-commits: it
// takes all the operations waiting, applies them in arrival order in one
// transaction, and syncs once for the batch (Badger SyncWrites). A later
// operation in a batch sees the writes of the earlier ones, so a duplicate or
// an older version in the same batch is decided as if it came after. An
// operation stages its writes only after all its reads succeed, so one bad
// operation fails alone; a batch too big for one transaction is split.
// Operations may be staged more than once (after a split), so they must be
// deterministic functions of what they read.
//
// Values read from Badger are copied out of the transaction (ValueCopy or
// decoding), since Badger's bytes are valid only inside it.
//
// Key layout (source names and request IDs never contain a NUL byte):
//
//	r<source>\x00<request_id>  receipt (dedupe.Receipt, JSON), expires after receipt_ttl
//	v<source>\x00<resource>    latest accepted version (versioning.Latest, JSON), never expires
//	o<seq:8 bytes big-endian>  outbox entry (forward.Entry, encoded), until forwarded
//	d<source>\x00<request_id>  dead letter (forward.Entry, encoded), until retried or discarded
//	p<source>\x00<request_id>  accepted payload of a forwarding source, for redelivery; expires after receipt_ttl
//	f<source>\x00<request_id>  forward status (webhookd.ForwardStatus, JSON) once it changed after the
//	                           decision; it overrides the receipt's and expires with it
//
// The forward status lives beside the receipt, not in it, because it changes
// once per forward attempt: settling an attempt then writes a few bytes
// instead of decoding and rewriting the whole receipt. A redelivery, which
// rewrites the receipt anyway, folds the status back into it.
package store
