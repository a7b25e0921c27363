// Package versioning owns the latest accepted version of each resource and
// the stale rule: a new request whose version is not greater than the
// resource's latest accepted version is stale and must not be applied. A
// source whose versions are too coarse to tell two changes apart may accept
// ties: then only a version lower than the latest is stale, and an equal one
// is applied after it, in arrival order.
//
// Versions arrive as text (a JSON number, a numeric string or an RFC 3339
// timestamp). Parse turns them into an order key so that the rule is one
// integer comparison, whatever the source's version format.
package versioning
