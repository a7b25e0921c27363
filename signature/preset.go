package signature

// Preset holds a scheme's default selectors, which configuration loading
// applies when a source does not set its own. A selector is
// "json:<dotted.path>" (a field of the body) or "header:<Name>", or several
// joined by "|", the first present winning. An empty field means the
// provider has no dependable place for that value.
type Preset struct {
	RequestID  string // identifies the event; the same across the provider's retries
	DeliveryID string // identifies one notification of the event, where a provider sends several
}

// PresetFor returns the defaults for scheme, or the zero Preset for schemes
// without any (none, hmac-sha256, and unknown names).
//
//   - github: RequestID "header:X-GitHub-Delivery", a GUID GitHub keeps
//     when it redelivers.
//   - stripe: RequestID "json:id", the event's evt_ id, kept on retries.
//   - standard-webhooks: RequestID "header:webhook-id|header:svix-id",
//     which the spec makes the idempotency key, stable across retries;
//     Svix spells it svix-id. The verifier reads the same one.
//   - shopify: RequestID "header:X-Shopify-Event-Id", shared by every
//     webhook the same event triggers, or its Events spelling
//     Shopify-Event-Id; Events deliveries that carry no event ID are keyed
//     on Shopify-Webhook-Id, which Shopify names their deduplication key.
//     DeliveryID "header:X-Shopify-Webhook-Id|header:Shopify-Webhook-Id",
//     one per webhook (subscription and event), kept on retries.
//   - slack: RequestID "json:event_id", present on Events API callbacks
//     (slash commands and interactivity payloads have none).
//
// No scheme gets a resource or version default: a configured resource is
// required on every delivery, and no provider puts an object ID and a
// per-object change counter in every event (Stripe's balance events have
// no object ID), so refusing such events would make the provider retry
// them for days.
func PresetFor(scheme string) Preset {
	switch scheme {
	case GitHub:
		return Preset{RequestID: "header:X-GitHub-Delivery"}
	case Stripe:
		return Preset{RequestID: "json:id"}
	case StandardWebhooks:
		return Preset{RequestID: "header:webhook-id|header:svix-id"}
	case Shopify:
		return Preset{
			RequestID:  "header:X-Shopify-Event-Id|header:Shopify-Event-Id|header:Shopify-Webhook-Id",
			DeliveryID: "header:X-Shopify-Webhook-Id|header:Shopify-Webhook-Id",
		}
	case Slack:
		return Preset{RequestID: "json:event_id"}
	}
	return Preset{}
}
