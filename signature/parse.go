package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The header parsers below are pure functions of a string so they can be
// fuzzed in isolation. Each one accepts a canonical spelling only: what
// they accept formats back to the same text, which keeps the grammar
// small enough to reason about.

// maxUnixSeconds is the last second of year 9999. No provider sends later
// timestamps, and refusing them keeps time arithmetic far from overflow.
const maxUnixSeconds = 253402300799

// parseUnixTimestamp reads decimal Unix seconds: "0" or digits without a
// leading zero, sign or whitespace.
func parseUnixTimestamp(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("empty timestamp")
	}
	if len(s) > 1 && s[0] == '0' {
		return time.Time{}, fmt.Errorf("timestamp %q has a leading zero", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return time.Time{}, fmt.Errorf("timestamp %q is not decimal Unix seconds", s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > maxUnixSeconds {
		return time.Time{}, fmt.Errorf("timestamp %q is out of range", s)
	}
	return time.Unix(n, 0), nil
}

func formatUnixTimestamp(t time.Time) string {
	return strconv.FormatInt(t.Unix(), 10)
}

// macFormat is how a scheme spells a raw HMAC-SHA256 in a header: an
// optional fixed prefix, then hex or standard padded base64.
type macFormat struct {
	prefix string
	base64 bool
}

// parse decodes one MAC. A value that does not decode to exactly one
// SHA-256 digest can never match, so it is reported as malformed rather
// than as a mismatch.
func (f macFormat) parse(s string) ([]byte, error) {
	rest, ok := strings.CutPrefix(s, f.prefix)
	if !ok {
		return nil, fmt.Errorf("value does not start with %q", f.prefix)
	}
	var mac []byte
	var err error
	if f.base64 {
		mac, err = base64.StdEncoding.DecodeString(rest)
	} else {
		mac, err = hex.DecodeString(rest)
	}
	if err != nil {
		return nil, fmt.Errorf("value is not valid %s", f.encodingName())
	}
	if len(mac) != sha256.Size {
		return nil, fmt.Errorf("value decodes to %d bytes, want %d", len(mac), sha256.Size)
	}
	// Go's base64 decoder skips CR/LF and tolerates stray padding bits;
	// insisting on the canonical text keeps one MAC to one spelling.
	if f.base64 && base64.StdEncoding.EncodeToString(mac) != rest {
		return nil, errors.New("value is not canonical base64")
	}
	return mac, nil
}

func (f macFormat) format(mac []byte) string {
	if f.base64 {
		return f.prefix + base64.StdEncoding.EncodeToString(mac)
	}
	return f.prefix + hex.EncodeToString(mac)
}

func (f macFormat) encodingName() string {
	if f.base64 {
		return "base64"
	}
	return "hex"
}

// stripeHeader is a parsed Stripe-Signature value.
type stripeHeader struct {
	timestamp time.Time
	v1        [][]byte
}

// parseStripeHeader reads "t=<unix>,v1=<hex>[,v1=<hex>...]". Stripe adds
// other schemes (v0 in test mode) and may add more, so unknown keys are
// skipped; but every item must be key=value, t must appear once, and at
// least one v1 must be present since that is the only scheme we can check.
func parseStripeHeader(s string) (stripeHeader, error) {
	var h stripeHeader
	seenT := false
	for item := range strings.SplitSeq(s, ",") {
		key, value, ok := strings.Cut(item, "=")
		if !ok || key == "" {
			return stripeHeader{}, fmt.Errorf("item %q is not key=value", item)
		}
		switch key {
		case "t":
			if seenT {
				return stripeHeader{}, errors.New("more than one t")
			}
			ts, err := parseUnixTimestamp(value)
			if err != nil {
				return stripeHeader{}, err
			}
			h.timestamp, seenT = ts, true
		case "v1":
			mac, err := stripeFormat.parse(value)
			if err != nil {
				return stripeHeader{}, fmt.Errorf("v1: %w", err)
			}
			h.v1 = append(h.v1, mac)
		}
	}
	if !seenT {
		return stripeHeader{}, errors.New("no t= timestamp")
	}
	if len(h.v1) == 0 {
		return stripeHeader{}, errors.New("no v1= signature")
	}
	return h, nil
}

var stripeFormat = macFormat{}

func formatStripeHeader(h stripeHeader) string {
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(formatUnixTimestamp(h.timestamp))
	for _, mac := range h.v1 {
		b.WriteString(",v1=")
		b.WriteString(stripeFormat.format(mac))
	}
	return b.String()
}

// standardV1 spells one entry of a webhook-signature list.
var standardV1 = macFormat{prefix: "v1,", base64: true}

// parseStandardSignatures reads a webhook-signature value: space-separated
// "<version>,<base64>" entries. Entries of versions other than v1 (such as
// the asymmetric v1a) are skipped, since the spec lets senders list several
// and a receiver uses the ones it understands; a list without any v1 entry
// cannot be verified with a shared secret and is malformed.
func parseStandardSignatures(s string) ([][]byte, error) {
	var macs [][]byte
	for entry := range strings.SplitSeq(s, " ") {
		if entry == "" {
			continue // tolerate doubled or trailing spaces between entries
		}
		version, _, ok := strings.Cut(entry, ",")
		if !ok || version == "" {
			return nil, fmt.Errorf("entry %q is not <version>,<signature>", entry)
		}
		if version != "v1" {
			continue
		}
		mac, err := standardV1.parse(entry)
		if err != nil {
			return nil, fmt.Errorf("v1: %w", err)
		}
		macs = append(macs, mac)
	}
	if len(macs) == 0 {
		return nil, errors.New("no v1 signature")
	}
	return macs, nil
}

func formatStandardSignatures(macs [][]byte) string {
	entries := make([]string, len(macs))
	for i, mac := range macs {
		entries[i] = standardV1.format(mac)
	}
	return strings.Join(entries, " ")
}

const standardSecretPrefix = "whsec_"

// parseStandardSecret returns the HMAC key inside a "whsec_<base64>"
// secret. Padding is optional because secrets are often pasted by hand and
// the key is unambiguous either way.
func parseStandardSecret(s string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(s, standardSecretPrefix)
	if !ok || encoded == "" {
		return nil, errBadStandardSecret
	}
	enc := base64.StdEncoding
	if !strings.HasSuffix(encoded, "=") {
		enc = base64.RawStdEncoding
	}
	key, err := enc.Strict().DecodeString(encoded)
	if err != nil || len(key) == 0 || strings.ContainsAny(encoded, "\r\n") {
		return nil, errBadStandardSecret
	}
	return key, nil
}

var errBadStandardSecret = errors.New(`standard-webhooks secrets must be "whsec_" followed by base64`)
