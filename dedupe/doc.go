// Package dedupe owns receipts: the evidence record of one business request
// ID, and the rule that tells new work from a redelivery of held work
// (duplicate) and from a reused request ID carrying another payload
// (conflict).
//
// Deliveries are keyed on the business request ID, never on the transport's
// delivery ID, which providers usually change on every retry; delivery IDs
// are kept on the receipt as evidence only.
package dedupe
