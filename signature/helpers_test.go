package signature_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
)

// The helpers below sign deliveries the way each provider documents, written
// out independently of the package so the tests check the scheme rather
// than echo the implementation.

func mac(key []byte, content string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(content))
	return m.Sum(nil)
}

func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

func signGitHub(secret string, body []byte, _ time.Time) http.Header {
	h := http.Header{}
	h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac([]byte(secret), string(body))))
	return h
}

func signShopify(secret string, body []byte, _ time.Time) http.Header {
	h := http.Header{}
	h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac([]byte(secret), string(body))))
	return h
}

func signStripe(secret string, body []byte, ts time.Time) http.Header {
	h := http.Header{}
	t := unix(ts)
	h.Set("Stripe-Signature", "t="+t+",v1="+hex.EncodeToString(mac([]byte(secret), t+"."+string(body))))
	return h
}

func signSlack(secret string, body []byte, ts time.Time) http.Header {
	h := http.Header{}
	t := unix(ts)
	h.Set("X-Slack-Request-Timestamp", t)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac([]byte(secret), "v0:"+t+":"+string(body))))
	return h
}

const testMessageID = "msg_2mYtT0dGkNHQ1QBzGKJ0m5Vx6Yc"

func standardKey(secret string) []byte {
	key, err := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	if err != nil {
		panic(err)
	}
	return key
}

func signStandardWebhooks(secret string, body []byte, ts time.Time) http.Header {
	h := http.Header{}
	t := unix(ts)
	h.Set("webhook-id", testMessageID)
	h.Set("webhook-timestamp", t)
	h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac(standardKey(secret), testMessageID+"."+t+"."+string(body))))
	return h
}

// signSvix signs as Svix does by default: the Standard Webhooks scheme
// under its own header names.
func signSvix(secret string, body []byte, ts time.Time) http.Header {
	std := signStandardWebhooks(secret, body, ts)
	h := http.Header{}
	for _, name := range []string{"id", "timestamp", "signature"} {
		h.Set("svix-"+name, std.Get("webhook-"+name))
	}
	return h
}

// signShopifyEvents signs as Shopify's Events deliveries do.
func signShopifyEvents(secret string, body []byte, _ time.Time) http.Header {
	h := http.Header{}
	h.Set("Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac([]byte(secret), string(body))))
	return h
}

func signGenericHex(secret string, body []byte, _ time.Time) http.Header {
	h := http.Header{}
	h.Set("X-Signature", hex.EncodeToString(mac([]byte(secret), string(body))))
	return h
}

func signGenericBase64(secret string, body []byte, _ time.Time) http.Header {
	h := http.Header{}
	h.Set("X-Webhook-Signature", "sha256="+base64.StdEncoding.EncodeToString(mac([]byte(secret), string(body))))
	return h
}

func whsec(key string) string {
	return "whsec_" + base64.StdEncoding.EncodeToString([]byte(key))
}
