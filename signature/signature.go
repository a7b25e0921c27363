package signature

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Scheme names as they appear in configuration.
const (
	None             = "none"
	HMACSHA256       = "hmac-sha256"
	StandardWebhooks = "standard-webhooks"
	Stripe           = "stripe"
	GitHub           = "github"
	Shopify          = "shopify"
	Slack            = "slack"
)

// Schemes lists the valid scheme names, for configuration error messages.
func Schemes() []string {
	return []string{None, HMACSHA256, StandardWebhooks, Stripe, GitHub, Shopify, Slack}
}

// DefaultTolerance is how far a signed timestamp may be from now, either
// way, when Config.Tolerance is zero. Five minutes is what Stripe, Slack and
// the Standard Webhooks spec all recommend.
const DefaultTolerance = 5 * time.Minute

// Headers is a case-insensitive header lookup; net/http.Header satisfies it,
// and the gateway adapts fasthttp's headers to it.
type Headers interface{ Get(name string) string }

// Config selects and parameterises a scheme.
type Config struct {
	Scheme    string        // one of the scheme constants; "" means None
	Secrets   []string      // any may match, to allow rotation; empty strings are ignored
	Tolerance time.Duration // for schemes that sign a timestamp; zero means DefaultTolerance
	Header    string        // hmac-sha256 only: the header carrying the signature
	Encoding  string        // hmac-sha256 only: "hex" (default) or "base64"
	Prefix    string        // hmac-sha256 only: e.g. "sha256=", stripped before decoding
}

// Verifier checks one delivery on the raw body bytes, before any parsing.
// Implementations are safe for concurrent use.
type Verifier interface {
	Verify(h Headers, body []byte, now time.Time) error
}

// New validates cfg and returns the verifier for its scheme. Scheme none
// returns a verifier that accepts everything, so callers never nil-check.
//
// Header, Encoding and Prefix are refused on schemes other than
// hmac-sha256, and secrets are refused on none: each would otherwise be
// silently ignored, leaving a source less protected than its author meant.
// Tolerance is ignored by schemes that sign no timestamp.
func New(cfg Config) (Verifier, error) {
	v, err := build(cfg)
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (c Config) tolerance() time.Duration {
	if c.Tolerance == 0 {
		return DefaultTolerance
	}
	return c.Tolerance
}

// ReplayWindow is how long one signed delivery passes the check: its
// tolerance either side of the timestamp it signs. Zero for the schemes
// that sign no timestamp, whose deliveries pass for good.
func (c Config) ReplayWindow() time.Duration {
	switch c.Scheme {
	case Stripe, Slack, StandardWebhooks:
		return 2 * c.tolerance()
	}
	return 0
}

// scheme is what every verifier also knows how to do: put fresh signature
// headers on a request, for Resign.
type scheme interface {
	Verifier
	resign(h http.Header, body []byte, now time.Time) error
}

func build(cfg Config) (scheme, error) {
	name := cfg.Scheme
	if name == "" {
		name = None
	}
	if !slices.Contains(Schemes(), name) {
		return nil, fmt.Errorf("scheme: unknown scheme %q", cfg.Scheme)
	}
	if name != HMACSHA256 {
		for _, f := range []struct{ field, value string }{{"header", cfg.Header}, {"encoding", cfg.Encoding}, {"prefix", cfg.Prefix}} {
			if f.value != "" {
				return nil, fmt.Errorf("%s: only applies to scheme %q, not %q", f.field, HMACSHA256, name)
			}
		}
	}
	if cfg.Tolerance < 0 {
		return nil, errors.New("tolerance: must not be negative")
	}
	tolerance := cfg.tolerance()

	if name == None {
		if slices.ContainsFunc(cfg.Secrets, func(s string) bool { return s != "" }) {
			return nil, fmt.Errorf("secrets: scheme %q checks nothing, so secrets must be empty (set a scheme to use them)", None)
		}
		return nullVerifier{}, nil
	}

	keys, err := keysFor(name, cfg.Secrets)
	if err != nil {
		return nil, err
	}

	switch name {
	case HMACSHA256:
		header := strings.TrimSpace(cfg.Header)
		if header == "" {
			return nil, fmt.Errorf("header: required for scheme %q", HMACSHA256)
		}
		if strings.ContainsAny(header, " \t\r\n:") {
			return nil, fmt.Errorf("header: %q is not a valid header name", cfg.Header)
		}
		var useBase64 bool
		switch cfg.Encoding {
		case "", "hex":
		case "base64":
			useBase64 = true
		default:
			return nil, errors.New("encoding: must be hex or base64")
		}
		return &bodyMAC{headers: []string{header}, format: macFormat{prefix: cfg.Prefix, base64: useBase64}, keys: keys}, nil
	case GitHub:
		return &bodyMAC{headers: []string{headerGitHub}, format: githubFormat, keys: keys, stale: []string{headerGitHubLegacy}}, nil
	case Shopify:
		// Shopify's Events deliveries spell the header without X- (and, for
		// now, send both): the same MAC of the same body.
		return &bodyMAC{headers: []string{headerShopify, headerShopifyEvents}, format: shopifyFormat, keys: keys}, nil
	case Stripe:
		return &stripeVerifier{keys: keys, tolerance: tolerance}, nil
	case Slack:
		return &slackVerifier{keys: keys, tolerance: tolerance}, nil
	default: // StandardWebhooks; the check above ruled out the rest
		return &standardVerifier{keys: keys, tolerance: tolerance}, nil
	}
}

// keysFor turns configured secrets into HMAC keys. Errors index the
// original list so an operator can find the offending entry.
func keysFor(scheme string, secrets []string) ([][]byte, error) {
	var keys [][]byte
	for i, s := range secrets {
		if s == "" {
			continue
		}
		if scheme != StandardWebhooks {
			keys = append(keys, []byte(s))
			continue
		}
		key, err := parseStandardSecret(s)
		if err != nil {
			return nil, fmt.Errorf("secrets[%d]: %w", i, err)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("secrets: at least one non-empty secret is required for scheme %q", scheme)
	}
	return keys, nil
}
