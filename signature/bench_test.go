package signature_test

import (
	"bytes"
	"testing"

	"github.com/webhookd/webhookd/signature"
)

func benchmarkVerify(b *testing.B, cfg signature.Config, sign signFunc) {
	body := bytes.Repeat([]byte(`{"k":"v"},`), 103)[:1024]
	v, err := signature.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	h := sign(cfg.Secrets[0], body, now)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(h, body, now); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyGitHub(b *testing.B) {
	benchmarkVerify(b, signature.Config{Scheme: signature.GitHub, Secrets: []string{"github secret"}}, signGitHub)
}

func BenchmarkVerifyStripe(b *testing.B) {
	benchmarkVerify(b, signature.Config{Scheme: signature.Stripe, Secrets: []string{"whsec_stripe"}}, signStripe)
}

func BenchmarkVerifyStandardWebhooks(b *testing.B) {
	benchmarkVerify(b, signature.Config{Scheme: signature.StandardWebhooks, Secrets: []string{specSecret}}, signStandardWebhooks)
}
