package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestOffUnlessAnEndpointIsNamed(t *testing.T) {
	ratio := 1.0
	for name, c := range map[string]struct {
		cfg  Config
		env  map[string]string
		want bool
	}{
		"nothing":                            {},
		"a ratio without endpoint":           {cfg: Config{SampleRatio: &ratio, ServiceName: "x"}},
		"only the sampler variable":          {env: map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}},
		"the section":                        {cfg: Config{Endpoint: "http://127.0.0.1:4318"}, want: true},
		"OTEL_EXPORTER_OTLP_ENDPOINT":        {env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: true},
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": {env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, want: true},
		"OTEL_SDK_DISABLED": {cfg: Config{Endpoint: "http://127.0.0.1:4318"},
			env: map[string]string{"OTEL_SDK_DISABLED": "true"}},
	} {
		tr, err := New(context.Background(), c.cfg, env(c.env))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tr.Enabled() != c.want {
			t.Errorf("%s: enabled %v, want %v", name, tr.Enabled(), c.want)
		}
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Errorf("%s: shutdown: %v", name, err)
		}
	}
}

func TestEndpointURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://collector:4318":        "http://collector:4318/v1/traces",
		"https://collector:4318/otlp/": "https://collector:4318/otlp/v1/traces",
		"collector:4318":               "",
		"ftp://collector":              "",
		"http://":                      "",
	} {
		got, err := EndpointURL(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("EndpointURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestTraceparentRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := trace.SpanContextFromContext(Parent(context.Background(), tp))
	if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() {
		t.Fatalf("Parent(%q) = %+v", tp, sc)
	}
	if got := Traceparent(sc); got != tp {
		t.Errorf("Traceparent = %q, want %q", got, tp)
	}
	unsampled := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	if got := Traceparent(trace.SpanContextFromContext(Parent(context.Background(), unsampled))); got != unsampled {
		t.Errorf("unsampled: Traceparent = %q", got)
	}
	for _, bad := range []string{"", "00-zz-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if sc := trace.SpanContextFromContext(Parent(context.Background(), bad)); sc.IsValid() {
			t.Errorf("Parent(%q) is valid: %+v", bad, sc)
		}
	}
	if Traceparent(trace.SpanContext{}) != "" {
		t.Error("an invalid span context has a traceparent")
	}
}
