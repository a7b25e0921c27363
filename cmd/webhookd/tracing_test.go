package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// span is a span as the collector received it, its IDs in hex.
type span struct {
	name              string
	kind              tracepb.Span_SpanKind
	trace, id, parent string
	attrs             map[string]string
	service           string
	failed            bool
}

// collector is an OTLP/HTTP receiver: it decodes the protobuf export
// requests the exporter posts to /v1/traces.
type collector struct {
	t     *testing.T
	mu    sync.Mutex
	spans []span
}

func newCollector(t *testing.T) (*collector, *httptest.Server) {
	c := &collector{t: t}
	srv := httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(srv.Close)
	return c, srv
}

func (c *collector) serve(w http.ResponseWriter, req *http.Request) {
	raw, err := io.ReadAll(req.Body)
	var export collectortrace.ExportTraceServiceRequest
	if err == nil && req.URL.Path == "/v1/traces" && req.Header.Get("Content-Type") == "application/x-protobuf" {
		err = proto.Unmarshal(raw, &export)
	} else if err == nil {
		err = fmt.Errorf("%s %s %s", req.Method, req.URL.Path, req.Header.Get("Content-Type"))
	}
	if err != nil {
		c.t.Errorf("collector: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range export.ResourceSpans {
		service := attributes(rs.Resource.GetAttributes())["service.name"]
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, span{
					name: s.Name, kind: s.Kind, service: service,
					trace: hex.EncodeToString(s.TraceId), id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId),
					attrs: attributes(s.Attributes), failed: s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR,
				})
			}
		}
	}
	c.mu.Unlock()
	answer, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(answer)
}

func attributes(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_ArrayValue:
			var parts []string
			for _, e := range v.ArrayValue.Values {
				parts = append(parts, e.GetStringValue())
			}
			m[kv.Key] = strings.Join(parts, ",")
		}
	}
	return m
}

// named returns the spans called name, in the order received.
func (c *collector) named(name string) []span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []span
	for _, s := range c.spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

// flakyDownstream answers 503 until up, 200 after, and keeps the
// traceparent of every request.
type flakyDownstream struct {
	up           atomic.Bool
	mu           sync.Mutex
	traceparents []string
	statuses     []int
}

func (d *flakyDownstream) serve(w http.ResponseWriter, req *http.Request) {
	io.Copy(io.Discard, req.Body)
	status := http.StatusServiceUnavailable
	if d.up.Load() {
		status = http.StatusOK
	}
	d.mu.Lock()
	d.traceparents = append(d.traceparents, req.Header.Get("traceparent"))
	d.statuses = append(d.statuses, status)
	d.mu.Unlock()
	w.WriteHeader(status)
}

func (d *flakyDownstream) seen() ([]string, []int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.traceparents...), append([]int(nil), d.statuses...)
}

// TestTraceEndToEnd follows one delivery that carries a provider's
// traceparent: its intake, its failed attempt, a restart of webhookd on
// the same Badger directory, and the attempt that delivers it are spans of
// the provider's trace, shaped as docs/operations.md describes, and each
// request the downstream receives continues that trace.
func TestTraceEndToEnd(t *testing.T) {
	coll, collSrv := newCollector(t)
	down := &flakyDownstream{}
	downSrv := httptest.NewServer(http.HandlerFunc(down.serve))
	t.Cleanup(downSrv.Close)
	dir := t.TempDir()
	config := fmt.Sprintf(`
listen: 127.0.0.1:0
data_dir: %q
shutdown_timeout: 5s
log: { level: warn }
admin: { listen: 127.0.0.1:0, token: %q }
tracing: { endpoint: %q, sample_ratio: 1, service_name: hooks }
sources:
  - name: billing
    request_id: json:request_id
    routes:
      - name: ledger
        url: %q
        max_attempts: 1000
        backoff: { initial: 50ms, max: 50ms }
`, dir, adminToken, collSrv.URL, downSrv.URL)

	const providerTrace = "0af7651916cd43dd8448eb211c80319c"
	const providerSpan = "b7ad6b7169203331"
	m, c := startMain(t, config)
	status, body := c.send(http.MethodPost, "http://"+c.public+"/hooks/billing", `{"request_id":"evt_1"}`,
		map[string]string{"traceparent": "00-" + providerTrace + "-" + providerSpan + "-01"})
	if status != http.StatusAccepted || body["decision"] != "accepted" {
		t.Fatalf("delivery: %d %v", status, body)
	}
	waitFor(t, "the first attempt", func() bool { tps, _ := down.seen(); return len(tps) > 0 })
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Close flushed the spans: the intake's and the failed attempt's.
	intake := coll.named("intake")
	if len(intake) != 1 {
		t.Fatalf("intake spans: %+v", intake)
	}
	in := intake[0]
	if in.trace != providerTrace || in.parent != providerSpan || in.kind != tracepb.Span_SPAN_KIND_SERVER || in.service != "hooks" {
		t.Errorf("intake span %+v: want a server span of service hooks, child of the provider's span", in)
	}
	for k, v := range map[string]string{"webhookd.source": "billing", "webhookd.request_id": "evt_1",
		"webhookd.decision": "accepted", "webhookd.routes": "ledger", "http.response.status_code": fmt.Sprint(status)} {
		if in.attrs[k] != v {
			t.Errorf("intake attribute %s = %q, want %q", k, in.attrs[k], v)
		}
	}
	for _, name := range []string{"verify", "decide"} {
		children := coll.named(name)
		if len(children) != 1 || children[0].trace != providerTrace || children[0].parent != in.id || children[0].failed {
			t.Errorf("%s spans %+v: want one, a child of the intake span", name, children)
		}
	}
	if d := coll.named("decide"); len(d) == 1 && d[0].attrs["webhookd.decision"] != "accepted" {
		t.Errorf("decide span attributes %v", d[0].attrs)
	}
	firstAttempts := coll.named("forward")
	if len(firstAttempts) == 0 {
		t.Fatal("no forward span before the restart")
	}
	checkAttempt := func(s span, attempt, status string) {
		t.Helper()
		if s.trace != providerTrace || s.parent != in.id || s.kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("forward span %+v: want a client span, child of the intake span", s)
		}
		for k, v := range map[string]string{"webhookd.source": "billing", "webhookd.route": "ledger", "webhookd.request_id": "evt_1",
			"webhookd.attempt": attempt, "http.response.status_code": status} {
			if s.attrs[k] != v {
				t.Errorf("forward span attribute %s = %q, want %q", k, s.attrs[k], v)
			}
		}
	}
	checkAttempt(firstAttempts[0], "1", "503")
	if !firstAttempts[0].failed || firstAttempts[0].attrs["webhookd.result"] != "retrying" {
		t.Errorf("failed attempt's span %+v: want an error, result retrying", firstAttempts[0])
	}

	// A new process on the same data directory, with a new forwarder,
	// sends the retry, and the downstream now takes it.
	down.up.Store(true)
	m, _ = startMain(t, config)
	t.Cleanup(func() { m.Close(context.Background()) })
	waitFor(t, "the delivering attempt", func() bool { _, st := down.seen(); return st[len(st)-1] == http.StatusOK })
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	tps, _ := down.seen()
	forwards := coll.named("forward")
	if len(forwards) != len(tps) {
		t.Fatalf("%d forward spans for %d requests", len(forwards), len(tps))
	}
	attempts := make(map[string]bool)
	for _, s := range forwards {
		attempts[s.id] = true
	}
	for i, tp := range tps {
		// Each request continues the trace from its own attempt's span.
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != providerTrace || !attempts[parts[2]] || parts[3] != "01" {
			t.Errorf("request %d to the downstream has traceparent %q, want an attempt's span of trace %s", i, tp, providerTrace)
		}
	}
	last := forwards[len(forwards)-1]
	checkAttempt(last, fmt.Sprint(len(tps)), "200")
	if last.failed || last.attrs["webhookd.result"] != "delivered" {
		t.Errorf("delivering attempt's span %+v", last)
	}
}

// TestBinaryTracesFromTheEnvironment runs the real binary configured by
// the standard OTEL_* variables alone: the downstream continues the
// provider's trace, and SIGTERM flushes the spans before the process ends.
func TestBinaryTracesFromTheEnvironment(t *testing.T) {
	coll, collSrv := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collSrv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	down := &flakyDownstream{}
	down.up.Store(true)
	downSrv := httptest.NewServer(http.HandlerFunc(down.serve))
	t.Cleanup(downSrv.Close)
	dir := t.TempDir()
	public, admin := freeAddr(t), freeAddr(t)
	configPath := filepath.Join(dir, "webhookd.yaml")
	if err := os.WriteFile(configPath, []byte(testConfig(t, filepath.Join(dir, "data"), downSrv.URL, public, admin)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, configPath, public)
	const providerTrace = "5b8efff798038103d269b633813fc60c"
	req, _ := http.NewRequest(http.MethodPost, "http://"+public+"/hooks/billing", strings.NewReader(billing("req-1", "sub_1", 1)))
	req.Header.Set("traceparent", "00-"+providerTrace+"-eee19b7ec3c1b174-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delivery: %v %v", resp, err)
	}
	resp.Body.Close()
	waitFor(t, "the forward", func() bool { tps, _ := down.seen(); return len(tps) == 1 })
	if tps, _ := down.seen(); !strings.HasPrefix(tps[0], "00-"+providerTrace+"-") {
		t.Errorf("downstream got traceparent %q, want one of trace %s", tps[0], providerTrace)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	for _, name := range []string{"intake", "verify", "decide", "forward"} {
		spans := coll.named(name)
		if len(spans) != 1 || spans[0].trace != providerTrace || spans[0].service != "from-env" {
			t.Errorf("%s spans after SIGTERM: %+v, want one of trace %s, service from-env", name, spans, providerTrace)
		}
	}
}
