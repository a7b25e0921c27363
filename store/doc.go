// Package store is the Badger backend of the storage contract
// (store/storetest). A decision reads the held receipt and the latest
// version, plans with dedupe.Decide, and writes the receipt, the latest
// version and an outbox entry for each route of the delivery in one
// transaction. One writer goroutine group-commits the operations waiting,
// in arrival order, synced once; a later operation sees the earlier ones'
// writes, and one that fails fails alone. After a failed commit the store
// refuses everything until it is opened again. Lanes and claims of the
// outbox live in memory (queue.go), and pages of the outbox are read
// from them: this process is the directory's only writer.
//
// Keys (names, routes and request IDs never contain a NUL byte):
//
//	r<source>\x00<request_id>  receipt, expires receipt_ttl after its last delivery
//	v<source>\x00<resource>    latest accepted version, never expires
//	o<seq:8 bytes>             outbox entry of one route, without its body, until settled
//	p<source>\x00<request_id>  payload: the entry of the first route enqueued, with the body every route's entry shares; expires with the receipt
//	d<source>\x00<route>\x00<request_id>  dead letter with its body, until retried or discarded
//	f<source>\x00<request_id>\x00<first_seen><route>  forward status of one route once settled
//	t<first_seen><source>\x00<request_id>  index of receipts by time, value: the receipt's route names; expires with its receipt or, if later, its payload
//	s<source>\x00<first_seen><request_id>  index of a source's receipts by time, empty; expires as the other
//	c<source>\x00<route>      a paused route, until resumed
//
// Times in keys are Unix seconds and nanoseconds, big-endian, so that keys
// sort by time. A receipt search reads an index backwards, newest first,
// and the receipt of each key; the index keys are written with the
// receipt at every delivery, so that they expire with it. Dead letters
// are retried and discarded in bulk in the order they were accepted, which
// their keys do not hold: a bulk page reads the metadata of every dead
// letter of its target and keeps the first ones in memory. The routes'
// breakers and rate budgets live in memory (control.go).
//
// Expired keys read as absent, and Expire deletes them: Badger would
// otherwise keep them where no newer key overlaps their tables, as the
// time-ordered indexes never do. It finds a receipt's keys from its index
// key by time alone, which names the receipt's routes and expires no
// earlier than its receipt or its payload: a redelivery through the admin
// API, which keeps the payload a receipt_ttl from then, writes the index
// keys again too.
//
// A body is written once, in the payload key, however many routes the
// delivery has, as the outbox entries are rewritten at every retry. The
// forward statuses live beside their receipt, one key a route, so that
// settling writes a few bytes and reads nothing; a redelivery folds them
// back into the receipt it rewrites.
package store
