package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"time"
)

const (
	headerGitHub         = "X-Hub-Signature-256"
	headerGitHubLegacy   = "X-Hub-Signature" // SHA-1; never trusted here
	headerShopify        = "X-Shopify-Hmac-Sha256"
	headerShopifyEvents  = "Shopify-Hmac-Sha256" // Shopify's Events deliveries
	headerStripe         = "Stripe-Signature"
	headerSlackSignature = "X-Slack-Signature"
	headerSlackTimestamp = "X-Slack-Request-Timestamp"
)

// standardHeaders is one spelling of the three Standard Webhooks headers.
type standardHeaders struct{ id, timestamp, signature string }

var (
	standardNames = standardHeaders{"webhook-id", "webhook-timestamp", "webhook-signature"}
	// svixNames are Svix's own, which it sends unless a customer pays for
	// white-labelled headers; svix's verifier takes both spellings.
	svixNames = standardHeaders{"svix-id", "svix-timestamp", "svix-signature"}
)

// standardNamesOf picks the spelling a delivery uses, and returns its ID:
// webhook-* when it carries a webhook-id, svix-* otherwise. The request-ID
// preset, header:webhook-id|header:svix-id, makes the same choice, so the
// ID a delivery is keyed on is always the one its signature covers.
func standardNamesOf(h Headers) (standardHeaders, string) {
	if id := get(h, standardNames.id); id != "" {
		return standardNames, id
	}
	if id := get(h, svixNames.id); id != "" {
		return svixNames, id
	}
	return standardNames, ""
}

var (
	githubFormat  = macFormat{prefix: "sha256="}
	shopifyFormat = macFormat{base64: true}
	slackFormat   = macFormat{prefix: "v0="}
)

// get reads a header, treating a blank value as absent.
func get(h Headers, name string) string {
	return strings.TrimSpace(h.Get(name))
}

// computeMAC signs the concatenation of parts without building it, since
// bodies can be large.
func computeMAC(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// anyMatch reports whether any key signs parts to any of the given MACs.
// Every key is tried before giving up, so rotation works whatever order the
// secrets are listed in.
func anyMatch(keys, macs [][]byte, parts ...[]byte) bool {
	for _, key := range keys {
		want := computeMAC(key, parts...)
		for _, got := range macs {
			if hmac.Equal(want, got) {
				return true
			}
		}
	}
	return false
}

// checkTolerance refuses timestamps too far from now in either direction:
// old ones may be replays, future ones would stay valid past the window.
func checkTolerance(header string, ts, now time.Time, tolerance time.Duration) error {
	switch {
	case ts.Before(now.Add(-tolerance)):
		return &Error{Reason: ReasonTimestamp, Header: header,
			Msg: fmt.Sprintf("timestamp %d is %s old, more than the %s tolerance", ts.Unix(), now.Sub(ts).Truncate(time.Second), tolerance)}
	case ts.After(now.Add(tolerance)):
		return &Error{Reason: ReasonTimestamp, Header: header,
			Msg: fmt.Sprintf("timestamp %d is %s in the future, more than the %s tolerance", ts.Unix(), ts.Sub(now).Truncate(time.Second), tolerance)}
	}
	return nil
}

// nullVerifier is scheme none: it accepts everything so that callers can
// treat every source alike.
type nullVerifier struct{}

func (nullVerifier) Verify(Headers, []byte, time.Time) error     { return nil }
func (nullVerifier) resign(http.Header, []byte, time.Time) error { return nil }

// bodyMAC is every scheme that signs the body alone (github, shopify and
// the generic hmac-sha256); they differ only in where the MAC goes and how
// it is spelled.
type bodyMAC struct {
	headers []string // where the MAC may be: the first present is read
	format  macFormat
	keys    [][]byte
	stale   []string // other signature headers the provider sends, dropped on resign
}

func (v *bodyMAC) Verify(h Headers, body []byte, _ time.Time) error {
	header, raw := v.headers[0], ""
	for _, name := range v.headers {
		if raw = get(h, name); raw != "" {
			header = name
			break
		}
	}
	if raw == "" {
		return missingAny(v.headers)
	}
	mac, err := v.format.parse(raw)
	if err != nil {
		return malformed(header, err)
	}
	if !anyMatch(v.keys, [][]byte{mac}, body) {
		return mismatch(header)
	}
	return nil
}

// resign signs again every spelling the recording carries, or the first
// when it carries none.
func (v *bodyMAC) resign(h http.Header, body []byte, _ time.Time) error {
	// A stale signature that no longer matches is worse than none: a
	// downstream checker would reject the replay for the wrong reason.
	for _, name := range v.stale {
		deleteHeader(h, name)
	}
	value := v.format.format(computeMAC(v.keys[0], body))
	set := false
	for _, name := range v.headers {
		if lookupHeader(h, name) != "" {
			setHeader(h, name, value)
			set = true
		}
	}
	if !set {
		setHeader(h, v.headers[0], value)
	}
	return nil
}

// stripeVerifier signs "{t}.{body}" and carries t inside its one header.
type stripeVerifier struct {
	keys      [][]byte
	tolerance time.Duration
}

func (v *stripeVerifier) Verify(h Headers, body []byte, now time.Time) error {
	raw := get(h, headerStripe)
	if raw == "" {
		return missing(headerStripe)
	}
	sh, err := parseStripeHeader(raw)
	if err != nil {
		return malformed(headerStripe, err)
	}
	if err := checkTolerance(headerStripe, sh.timestamp, now, v.tolerance); err != nil {
		return err
	}
	// The parser accepts only canonical decimal, so formatting reproduces
	// the exact bytes Stripe signed.
	if !anyMatch(v.keys, sh.v1, []byte(formatUnixTimestamp(sh.timestamp)), dot, body) {
		return mismatch(headerStripe)
	}
	return nil
}

func (v *stripeVerifier) resign(h http.Header, body []byte, now time.Time) error {
	ts := time.Unix(now.Unix(), 0)
	mac := computeMAC(v.keys[0], []byte(formatUnixTimestamp(ts)), dot, body)
	setHeader(h, headerStripe, formatStripeHeader(stripeHeader{timestamp: ts, v1: [][]byte{mac}}))
	return nil
}

// slackVerifier signs "v0:{timestamp}:{body}" with the timestamp in its
// own header.
type slackVerifier struct {
	keys      [][]byte
	tolerance time.Duration
}

func (v *slackVerifier) Verify(h Headers, body []byte, now time.Time) error {
	rawSig := get(h, headerSlackSignature)
	if rawSig == "" {
		return missing(headerSlackSignature)
	}
	rawTS := get(h, headerSlackTimestamp)
	if rawTS == "" {
		return missing(headerSlackTimestamp)
	}
	ts, err := parseUnixTimestamp(rawTS)
	if err != nil {
		return malformed(headerSlackTimestamp, err)
	}
	mac, err := slackFormat.parse(rawSig)
	if err != nil {
		return malformed(headerSlackSignature, err)
	}
	if err := checkTolerance(headerSlackTimestamp, ts, now, v.tolerance); err != nil {
		return err
	}
	if !anyMatch(v.keys, [][]byte{mac}, slackBase(rawTS), body) {
		return mismatch(headerSlackSignature)
	}
	return nil
}

func (v *slackVerifier) resign(h http.Header, body []byte, now time.Time) error {
	ts := formatUnixTimestamp(now)
	setHeader(h, headerSlackTimestamp, ts)
	setHeader(h, headerSlackSignature, slackFormat.format(computeMAC(v.keys[0], slackBase(ts), body)))
	return nil
}

// slackBase is the part of Slack's signed content before the body.
func slackBase(ts string) []byte {
	return []byte("v0:" + ts + ":")
}

// standardVerifier implements the symmetric (v1) Standard Webhooks scheme,
// under either spelling of its headers.
type standardVerifier struct {
	keys      [][]byte
	tolerance time.Duration
}

func (v *standardVerifier) Verify(h Headers, body []byte, now time.Time) error {
	names, id := standardNamesOf(h)
	if id == "" {
		return missingAny([]string{standardNames.id, svixNames.id})
	}
	rawTS := get(h, names.timestamp)
	if rawTS == "" {
		return missing(names.timestamp)
	}
	rawSig := get(h, names.signature)
	if rawSig == "" {
		return missing(names.signature)
	}
	ts, err := parseUnixTimestamp(rawTS)
	if err != nil {
		return malformed(names.timestamp, err)
	}
	macs, err := parseStandardSignatures(rawSig)
	if err != nil {
		return malformed(names.signature, err)
	}
	if err := checkTolerance(names.timestamp, ts, now, v.tolerance); err != nil {
		return err
	}
	if !anyMatch(v.keys, macs, []byte(id), dot, []byte(rawTS), dot, body) {
		return mismatch(names.signature)
	}
	return nil
}

// resign keeps the recorded ID, and its spelling: it is the receiver's
// idempotency key, and a new one would make a replay look like a different
// message.
func (v *standardVerifier) resign(h http.Header, body []byte, now time.Time) error {
	names, id := standardNamesOf(recorded(h))
	if id == "" {
		return missingAny([]string{standardNames.id, svixNames.id})
	}
	for name, value := range names.sign(v.keys[0], id, now, body) {
		setHeader(h, name, value)
	}
	return nil
}

var dot = []byte(".")
