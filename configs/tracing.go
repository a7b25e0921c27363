package configs

import "github.com/webhookd/webhookd/tracing"

// tracingProblems checks the tracing section's endpoint, which the
// validator's tags cannot: it must be a base URL the exporter can post to.
func (c *Config) tracingProblems() []Problem {
	if c.Tracing.Endpoint == "" {
		return nil
	}
	if _, err := tracing.EndpointURL(c.Tracing.Endpoint); err != nil {
		return []Problem{{Path: "tracing.endpoint", Msg: "must be an http or https URL, e.g. http://collector:4318"}}
	}
	return nil
}
