package configs

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTracing(t *testing.T) {
	cfg, err := Parse([]byte(`
tracing: {endpoint: "http://collector:4318", sample_ratio: 0.25, service_name: hooks}
sources: [{name: billing, request_id: 'header:Idempotency-Key'}]`))
	if err != nil {
		t.Fatal(err)
	}
	tr := cfg.Tracing
	if tr.Endpoint != "http://collector:4318" || tr.SampleRatio == nil || *tr.SampleRatio != 0.25 || tr.ServiceName != "hooks" {
		t.Fatalf("tracing = %+v", tr)
	}
	cfg, err = Parse([]byte("sources: [{name: billing, request_id: 'header:Idempotency-Key'}]"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing.Endpoint != "" || cfg.Tracing.SampleRatio != nil {
		t.Fatalf("tracing is on by default: %+v", cfg.Tracing)
	}
}

func TestParseTracingRefusesBadValues(t *testing.T) {
	for field, doc := range map[string]string{
		"tracing.endpoint":     `tracing: {endpoint: "collector:4318"}`,
		"tracing.sample_ratio": `tracing: {endpoint: "http://collector:4318", sample_ratio: 2}`,
	} {
		_, err := Parse([]byte(doc + "\nsources: [{name: billing, request_id: 'header:Idempotency-Key'}]"))
		var verr *ValidationError
		if !errors.As(err, &verr) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v, want a problem naming %s", doc, err, field)
		}
	}
}
