// Package sink is a downstream stand-in: an HTTP server to point a source's
// forward URL at, for demos and tests. It prints one line per request,
// counts arrivals per Idempotency-Key, flags a version of a resource that
// arrives after a newer one, checks the Standard Webhooks signature of
// signed forwarding, records requests in the recording format, and injects
// failures and latency on demand, so that webhookd's retries, ordering and
// signing can be watched from the receiving end. GET /stats answers its
// counts as JSON.
package sink
