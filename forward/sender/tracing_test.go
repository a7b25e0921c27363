package sender_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
)

const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	intakeSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + traceID + "-" + intakeSpan + "-01"
)

// acceptTraced decides a delivery of billing's default route accepted
// under the span trace names, "" for none.
func acceptTraced(t *testing.T, s backend, requestID, trace string) {
	t.Helper()
	d := webhookd.Delivery{Source: "billing", RequestID: requestID, ReceivedAt: time.Now(), Forward: true,
		Routes: []string{defaultRoute}, Body: []byte(`{}`), Trace: trace}
	if got := decide(t, s, d); got != webhookd.Accepted {
		t.Fatalf("%s: %s", requestID, got)
	}
}

// startTraced starts a forwarder whose spans rec records; a nil rec is
// tracing off.
func startTraced(t *testing.T, s backend, url string, rec *tracetest.SpanRecorder) {
	t.Helper()
	f := sender.New(s, map[forward.Target]sender.Route{target("billing"): route(url)}, zaptest.NewLogger(t))
	if rec != nil {
		f.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	}
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestAttemptsAreSpansOfTheEntrysTrace: each attempt is a client span,
// a child of the span that accepted the entry, and its request carries
// that attempt's span as traceparent.
func TestAttemptsAreSpansOfTheEntrysTrace(t *testing.T) {
	s := openStore(t, t.TempDir())
	down := newDownstream(t, func(_ *http.Request, n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	rec := tracetest.NewSpanRecorder()
	startTraced(t, s, down.URL, rec)
	acceptTraced(t, s, "traced", traceparent)
	eventually(t, "delivery", delivered(t, s, "traced"))
	eventually(t, "two spans", func() bool { return len(rec.Ended()) == 2 })
	spans, arrivals := rec.Ended(), down.all()
	if len(arrivals) != 2 {
		t.Fatalf("%d requests", len(arrivals))
	}
	for i, sp := range spans {
		sc := sp.SpanContext()
		if sp.Name() != "forward" || sp.SpanKind() != trace.SpanKindClient || sc.TraceID().String() != traceID ||
			sp.Parent().SpanID().String() != intakeSpan || !sp.Parent().IsRemote() {
			t.Errorf("span %d: %s %s, trace %s, parent %s", i, sp.Name(), sp.SpanKind(), sc.TraceID(), sp.Parent().SpanID())
		}
		want := "00-" + traceID + "-" + sc.SpanID().String() + "-01"
		if got := arrivals[i].header.Get("Traceparent"); got != want {
			t.Errorf("request %d: traceparent %q, want %q", i, got, want)
		}
		a := attrs(sp)
		wantStatus, wantResult := []int64{503, 200}[i], []string{"retrying", "delivered"}[i]
		if a["webhookd.source"].AsString() != "billing" || a["webhookd.route"].AsString() != defaultRoute ||
			a["webhookd.request_id"].AsString() != "traced" || a["webhookd.attempt"].AsInt64() != int64(i+1) ||
			a["http.response.status_code"].AsInt64() != wantStatus || a["webhookd.result"].AsString() != wantResult {
			t.Errorf("span %d attributes %v", i, a)
		}
		if failed := sp.Status().Code == codes.Error; failed != (i == 0) {
			t.Errorf("span %d status %+v", i, sp.Status())
		}
	}
}

// TestAnUntracedEntryStartsATrace: an entry accepted with tracing off
// has no trace to join; its attempt starts one of its own.
func TestAnUntracedEntryStartsATrace(t *testing.T) {
	s := openStore(t, t.TempDir())
	down := newDownstream(t, nil)
	rec := tracetest.NewSpanRecorder()
	startTraced(t, s, down.URL, rec)
	acceptTraced(t, s, "untraced", "")
	eventually(t, "delivery", delivered(t, s, "untraced"))
	eventually(t, "a span", func() bool { return len(rec.Ended()) == 1 })
	sp := rec.Ended()[0]
	if sp.Parent().IsValid() {
		t.Errorf("span has parent %+v", sp.Parent())
	}
	if got := down.all()[0].header.Get("Traceparent"); !strings.Contains(got, sp.SpanContext().TraceID().String()) {
		t.Errorf("traceparent %q, want the span's trace %s", got, sp.SpanContext().TraceID())
	}
}

// TestTracingOffSendsNoTraceparent: with tracing off, a traced entry's
// request carries no traceparent; webhookd makes no span to name.
func TestTracingOffSendsNoTraceparent(t *testing.T) {
	s := openStore(t, t.TempDir())
	down := newDownstream(t, nil)
	startTraced(t, s, down.URL, nil)
	acceptTraced(t, s, "traced", traceparent)
	eventually(t, "delivery", delivered(t, s, "traced"))
	if got, ok := down.all()[0].header["Traceparent"]; ok {
		t.Errorf("traceparent %q with tracing off", got)
	}
}
