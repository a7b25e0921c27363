// Package gateway speaks HTTP. The public listener takes webhooks at
// POST /hooks/{source}: it parses and validates each delivery, hands it to a
// Decider and answers with the decision. The admin listener serves the read
// API behind a bearer token. One error handler maps every error to its HTTP
// status through one table.
//
// Fiber reuses request buffers once a handler returns: values kept past the
// handler are copied, and a Delivery's body and headers are only read while
// Decide runs.
package gateway
