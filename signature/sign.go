package signature

import (
	"errors"
	"net/http"
	"strings"
	"time"
)

// SignStandard returns the Standard Webhooks headers (webhook-id,
// webhook-timestamp, webhook-signature) for body, signed with secret
// ("whsec_" + base64). The timestamp is truncated to whole seconds, as the
// header carries.
func SignStandard(secret, id string, ts time.Time, body []byte) (map[string]string, error) {
	key, err := parseStandardSecret(secret)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, errors.New("standard-webhooks: message id must not be empty")
	}
	return standardNames.sign(key, id, ts, body), nil
}

// sign returns the three headers, spelt as n spells them.
func (n standardHeaders) sign(key []byte, id string, ts time.Time, body []byte) map[string]string {
	unix := formatUnixTimestamp(ts)
	mac := computeMAC(key, []byte(id), dot, []byte(unix), dot, body)
	return map[string]string{
		n.id:        id,
		n.timestamp: unix,
		n.signature: formatStandardSignatures([][]byte{mac}),
	}
}

// Resign replaces, in h, the signature headers of cfg's scheme with fresh
// ones made with cfg's first non-empty secret at now. It exists for replays
// of recorded deliveries, whose original signatures have aged out of every
// receiver's tolerance. Other headers are kept; for standard-webhooks the
// recorded webhook-id (or svix-id) is reused and must be present. For none it does
// nothing.
func Resign(cfg Config, h http.Header, body []byte, now time.Time) error {
	s, err := build(cfg)
	if err != nil {
		return err
	}
	return s.resign(h, body, now)
}

// Recorded headers may have been stored under non-canonical keys, which
// http.Header's own methods would miss; these helpers match names
// case-insensitively so a replay never carries a stale duplicate.

// recorded reads recorded headers as Headers.
type recorded http.Header

func (r recorded) Get(name string) string { return lookupHeader(http.Header(r), name) }

func lookupHeader(h http.Header, name string) string {
	if v := h.Get(name); v != "" {
		return strings.TrimSpace(v)
	}
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return strings.TrimSpace(vs[0])
		}
	}
	return ""
}

func deleteHeader(h http.Header, name string) {
	for k := range h {
		if strings.EqualFold(k, name) {
			delete(h, k)
		}
	}
}

func setHeader(h http.Header, name, value string) {
	deleteHeader(h, name)
	h.Set(name, value)
}
