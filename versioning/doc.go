// Package versioning owns the latest accepted version of each resource and
// the stale rule: a new request whose version is not greater than the
// resource's latest accepted version is stale and must not be applied.
//
// Versions arrive as text (a JSON number, a numeric string or an RFC 3339
// timestamp). Parse turns them into an order key so that the rule is one
// integer comparison, whatever the source's version format.
package versioning
