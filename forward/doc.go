// Package forward is the vocabulary and the rules of the outbox: the entry
// a backend writes in the same transaction as an accepted delivery's
// receipt, the result of an attempt to forward it, the retry policy, and
// the queue a forwarder claims entries from. It imports nothing heavy, so
// every backend can use it; the HTTP sender is package forward/sender.
package forward
