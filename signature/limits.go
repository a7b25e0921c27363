package signature

// Body limits of the provider presets, in bytes.
const (
	// GitHubMaxBody covers GitHub's documented cap: "Payloads are capped at
	// 25 MB"; GitHub sends nothing for an event whose payload is larger.
	GitHubMaxBody = 25 << 20
	// UndocumentedMaxBody is the preset of providers that document no cap
	// (Stripe, Shopify, Slack, Standard Webhooks senders): ten times the
	// global default of 1 MiB. Shopify's staff have said its bodies can pass a
	// megabyte (large orders and products), and a sender that documents no
	// cap may send what it likes: a refusal loses the event for good where
	// the provider does not retry it, and a limit this size still bounds
	// what an unsigned request can make webhookd read.
	UndocumentedMaxBody = 10 << 20
)

// MaxBodyFor returns the largest body scheme's provider may send, which
// configuration loading makes the default max_body of a source verified
// by it, or 0 for schemes with no provider behind them (none,
// hmac-sha256, and unknown names), whose sources take the global max_body.
func MaxBodyFor(scheme string) int {
	switch scheme {
	case GitHub:
		return GitHubMaxBody
	case Stripe, Shopify, Slack, StandardWebhooks:
		return UndocumentedMaxBody
	}
	return 0
}
