// Package signature owns webhook authenticity for webhookd: it checks that an
// inbound delivery really came from the provider that claims to have sent it,
// and it signs what webhookd forwards or replays.
//
// Verification runs on the raw body bytes before anything parses them,
// because every supported provider signs exact bytes and any re-encoding
// breaks the signature. Each provider's scheme (GitHub, Stripe, Shopify,
// Slack, Standard Webhooks, or a configurable generic HMAC-SHA256) is a
// [Verifier] built by [New] from a [Config]; failures are [*Error] values
// whose [Reason] the HTTP layer reports to the sender.
//
// The package also owns per-scheme defaults for where a delivery's identity
// lives ([PresetFor]), since that knowledge comes from the same provider
// documentation as the signature rules.
//
// It does not own secrets storage, replay/duplicate detection (beyond the
// timestamp tolerance that the schemes themselves define), or HTTP handling.
package signature
