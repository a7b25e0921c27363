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
// The writer keeps the latest versions it read or committed lately in
// memory (latestCache): Badger's Get searches every LSM level for a key
// that is rewritten as often as a resource's latest version. Only committed
// values go in, and only the writer reads it; everything else reads Badger.
//
// On Linux a goroutine follows the commits and turns readahead off
// (MADV_RANDOM) for Badger's memtable logs (adviseLogs): with readahead, the
// kernel caches a log in large folios, and the sync of every commit writes
// whole folios back, 10 to 25 times the bytes the commit changed.
//
// Under a soft memory limit (MemoryLimit), Badger's memtables and tables are
// smaller (tableSizes): building tables is most of a loaded store's heap.
// Memtable logs a crash left are replayed at Badger's default size first,
// since Badger cannot replay a log into a smaller memtable than wrote it.
//
// Values read from Badger are copied out of the transaction (ValueCopy or
// decoding), since Badger's bytes are valid only inside it.
//
// Receipts, latest versions and forward statuses are stored in a compact
// binary form (record.go): a decision's records are what fills Badger's
// memtables, and their size set how often Badger builds a table on the
// cores the request path runs on. Records written as JSON by builds before
// it are still read. Outbox entries and payloads are forward.Entry's
// encoding.
//
// Key layout (source names and request IDs never contain a NUL byte):
//
//	r<source>\x00<request_id>  receipt (dedupe.Receipt), expires after receipt_ttl
//	v<source>\x00<resource>    latest accepted version (versioning.Latest), never expires
//	o<seq:8 bytes big-endian>  outbox entry (forward.Entry without its body, encoded), until forwarded
//	p<source>\x00<request_id>  payload: the entry with its body, for forwarding and redelivery;
//	                           expires after receipt_ttl
//	d<source>\x00<request_id>  dead letter (forward.Entry with its body, encoded), until retried or discarded
//	f<source>\x00<request_id>\x00<first_seen: Unix seconds, 8 bytes, nanoseconds, 4 bytes; big-endian>
//	                           forward status (forwardRecord) once it changed after the decision;
//	                           it overrides the receipt's and expires receipt_ttl after it was written.
//	                           Builds before first_seen was in the key wrote f<source>\x00<request_id>.
//
// A body is written once, in the payload key, not in the outbox entry too:
// the outbox entry is rewritten on every retry and deleted on delivery, so
// it stays small. An entry that waits longer than receipt_ttl loses its
// payload and is dead-lettered as such (forward.ErrPayloadGone); a dead
// letter keeps its own copy of the body, as it outlives the payload.
//
// The forward status lives beside the receipt, not in it, because it changes
// once per forward attempt: settling an attempt then writes a few bytes
// instead of decoding and rewriting the whole receipt. A redelivery, which
// rewrites the receipt anyway, folds the status back into it. Settling
// reads nothing: a Get searches every LSM level, and the two a settle made
// (is the entry there, when does the receipt expire) were a sixth of a
// drain's CPU. The forwarder guarantees the first (Store.Holds); the status
// expires a TTL after it is written, no earlier than its receipt.
package store
