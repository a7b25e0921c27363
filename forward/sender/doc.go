// Package sender delivers outbox entries to each source's downstream over
// HTTP (fasthttp), at least once, signing them when the source says so.
package sender
