package gateway

import (
	"context"
	"encoding/hex"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/tracing"
)

const tracedConfig = `
admin: { token: "t0ken" }
sources:
  - name: orders
    request_id: json:id
    verify: { scheme: hmac-sha256, secrets: [s3cret], header: X-Signature, encoding: hex }
    routes:
      - { name: ledger, url: "http://127.0.0.1:1/" }
      - { name: audit, url: "http://127.0.0.1:1/" }
`

const (
	providerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	providerSpan  = "00f067aa0ba902b7"
)

func traced(t *testing.T) (*fixture, *tracetest.SpanRecorder) {
	f := newFixtureFor(t, tracedConfig, nil)
	rec := tracetest.NewSpanRecorder()
	f.server.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	return f, rec
}

func spansByName(rec *tracetest.SpanRecorder) map[string]sdktrace.ReadOnlySpan {
	m := make(map[string]sdktrace.ReadOnlySpan)
	for _, s := range rec.Ended() {
		m[s.Name()] = s
	}
	return m
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func outboxOf(t *testing.T, f *fixture) []forward.Entry {
	t.Helper()
	es, _, err := f.store.Outbox(context.Background(), forward.Target{Source: "orders"}, storage.Page{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// TestIntakeContinuesTheProvidersTrace: a delivery with a traceparent is
// a server span of that trace, with verify and decide as its children,
// and its outbox entries keep the intake span as their trace.
func TestIntakeContinuesTheProvidersTrace(t *testing.T) {
	f, rec := traced(t)
	body := `{"id":"ord_1"}`
	r := f.post("orders", body, "X-Signature", hex.EncodeToString(mac([]byte("s3cret"), body)),
		"traceparent", "00-"+providerTrace+"-"+providerSpan+"-01")
	if r.status != http.StatusAccepted {
		t.Fatalf("status %d %v", r.status, r.body)
	}
	spans := spansByName(rec)
	intake := spans["intake"]
	if intake == nil || len(rec.Ended()) != 3 {
		t.Fatalf("spans %v", spans)
	}
	sc := intake.SpanContext()
	if sc.TraceID().String() != providerTrace || intake.Parent().SpanID().String() != providerSpan ||
		intake.SpanKind() != trace.SpanKindServer {
		t.Errorf("intake: trace %s, parent %s, kind %s", sc.TraceID(), intake.Parent().SpanID(), intake.SpanKind())
	}
	a := attrsOf(intake)
	if a["webhookd.source"].AsString() != "orders" || a["webhookd.request_id"].AsString() != "ord_1" ||
		a["webhookd.decision"].AsString() != "accepted" || a["http.response.status_code"].AsInt64() != http.StatusAccepted ||
		len(a["webhookd.routes"].AsStringSlice()) != 2 {
		t.Errorf("intake attributes %v", a)
	}
	for _, name := range []string{"verify", "decide"} {
		s := spans[name]
		if s == nil || s.Parent().SpanID() != sc.SpanID() || s.Status().Code == codes.Error {
			t.Errorf("%s: %+v, want a child of the intake span", name, s)
		}
	}
	want := tracing.Traceparent(sc)
	for _, e := range outboxOf(t, f) {
		if e.Trace != want {
			t.Errorf("entry %s/%s trace %q, want the intake span's %q", e.Route, e.RequestID, e.Trace, want)
		}
	}
}

// TestRefusedDeliveryIsASpan: a delivery refused at verify is an intake
// span saying so, with a failed verify child and no decide.
func TestRefusedDeliveryIsASpan(t *testing.T) {
	f, rec := traced(t)
	r := f.post("orders", `{"id":"ord_1"}`, "X-Signature", "00")
	if r.status != http.StatusUnauthorized {
		t.Fatalf("status %d", r.status)
	}
	spans := spansByName(rec)
	if spans["decide"] != nil || spans["verify"] == nil || spans["verify"].Status().Code != codes.Error {
		t.Errorf("spans %v", spans)
	}
	if a := attrsOf(spans["intake"]); a["webhookd.decision"].AsString() != "rejected" || a["http.response.status_code"].AsInt64() != 401 {
		t.Errorf("intake attributes %v", a)
	}
	if spans["intake"].Parent().IsValid() {
		t.Error("a request without traceparent continued a trace")
	}
}

// TestTracingOffKeepsNoTrace: without a tracer, entries have no trace.
func TestTracingOffKeepsNoTrace(t *testing.T) {
	f := newFixtureFor(t, tracedConfig, nil)
	body := `{"id":"ord_1"}`
	f.post("orders", body, "X-Signature", hex.EncodeToString(mac([]byte("s3cret"), body)), "traceparent", "00-"+providerTrace+"-"+providerSpan+"-01")
	for _, e := range outboxOf(t, f) {
		if e.Trace != "" {
			t.Errorf("entry %s trace %q with tracing off", e.Route, e.Trace)
		}
	}
}
