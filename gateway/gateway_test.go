package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/internal/ratelog"
	"github.com/webhookd/webhookd/store"
)

const testConfig = `
max_body: 2048
admin: { token: "t0ken" }
sources:
  - name: billing
    request_id: json:request_id
    delivery_id: header:X-Delivery-Id
    resource: json:data.object.id
    version: json:data.object.version
    fingerprint_exclude: [sent_at]
  - name: strict
    request_id: header:Idempotency-Key
    resource: header:X-Resource
    version: json:updated_at
    version_format: timestamp
    responses: { stale: 409 }
  - name: plain
    request_id: json:items.0.id
`

type fixture struct {
	t      testing.TB
	server *Server
	store  *store.Store
}

func newFixture(t *testing.T, wrap func(Decider) Decider) *fixture {
	t.Helper()
	return newFixtureFor(t, testConfig, wrap)
}

// newFixtureFor builds a server for yaml on a fresh store; wrap, if given,
// wraps the store's Decider.
func newFixtureFor(t testing.TB, yaml string, wrap func(Decider) Decider) *fixture {
	t.Helper()
	return newFixtureIn(t, yaml, t.TempDir(), wrap)
}

// newFixtureIn is newFixtureFor on the store in dir, new or not.
func newFixtureIn(t testing.TB, yaml, dir string, wrap func(Decider) Decider) *fixture {
	t.Helper()
	cfg, err := configs.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(dir)
	st.Logger = zaptest.NewLogger(t)
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var d Decider = st
	if wrap != nil {
		d = wrap(st)
	}
	srv, err := NewServer(cfg, d, st, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, server: srv, store: st}
}

type response struct {
	status int
	header http.Header
	body   map[string]any
}

func (f *fixture) do(req *http.Request) response {
	f.t.Helper()
	app := f.server.Public()
	if strings.HasPrefix(req.URL.Path, "/admin/") {
		app = f.server.Admin()
	}
	resp, err := app.Test(req, -1)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		f.t.Fatalf("%s %s: answer is not JSON: %q", req.Method, req.URL, raw)
	}
	return r
}

func (f *fixture) post(source, body string, headers ...string) response {
	f.t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/hooks/"+source, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return f.do(req)
}

func (f *fixture) admin(path string) response {
	f.t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer t0ken")
	return f.do(req)
}

func (f *fixture) hasReceipt(source, requestID string) bool {
	_, err := f.store.Receipt(context.Background(), source, requestID)
	return err == nil
}

func billing(requestID, resource string, version any) string {
	b, _ := json.Marshal(map[string]any{
		"request_id": requestID,
		"sent_at":    "now",
		"data":       map[string]any{"object": map[string]any{"id": resource, "version": version}},
	})
	return string(b)
}

func expect(t *testing.T, r response, status int, decision string) {
	t.Helper()
	if r.status != status || r.body["decision"] != decision || r.header.Get("Webhook-Decision") != decision {
		t.Errorf("got %d %v (header %q), want %d %s", r.status, r.body, r.header.Get("Webhook-Decision"), status, decision)
	}
}

func TestRetriesWithNewDeliveryIDs(t *testing.T) {
	f := newFixture(t, nil)
	body := billing("req-4401", "sub_1", 1)
	expect(t, f.post("billing", body, "X-Delivery-Id", "dlv-1"), 202, "accepted")
	r := f.post("billing", strings.Replace(body, `"now"`, `"later"`, 1), "X-Delivery-Id", "dlv-2") // sent_at is left out of the fingerprint
	expect(t, r, 200, "duplicate")
	expect(t, f.post("billing", body, "X-Delivery-Id", "dlv-3"), 200, "duplicate")
	want := map[string]any{"decision": "duplicate", "source": "billing", "request_id": "req-4401", "delivery_id": "dlv-2", "resource": "sub_1", "version": "1", "latest_version": "1"}
	for k, v := range want {
		if r.body[k] != v {
			t.Errorf("answer[%s] = %v, want %v", k, r.body[k], v)
		}
	}

	rec := f.admin("/admin/receipts/billing/req-4401")
	if rec.status != 200 || rec.body["attempts"] != 3.0 || rec.body["decision"] != "accepted" {
		t.Fatalf("receipt = %d %v", rec.status, rec.body)
	}
	deliveries := rec.body["deliveries"].([]any)
	for i, d := range deliveries {
		if id := d.(map[string]any)["delivery_id"]; id != fmt.Sprint("dlv-", i+1) {
			t.Errorf("deliveries[%d].delivery_id = %v", i, id)
		}
	}
	for _, key := range []string{"source", "request_id", "resource", "version", "reason", "duplicate_decision", "ordering_decision", "payload_sha256", "first_seen", "last_seen", "residual_risk"} {
		if _, ok := rec.body[key]; !ok {
			t.Errorf("receipt lacks %s", key)
		}
	}
}

func TestStaleVersions(t *testing.T) {
	f := newFixture(t, nil)
	expect(t, f.post("billing", billing("req-10", "sub_1", 10)), 202, "accepted")
	r := f.post("billing", billing("req-9", "sub_1", 9))
	expect(t, r, 200, "stale")
	if r.body["latest_version"] != "10" || r.body["version"] != "9" {
		t.Errorf("stale answer = %v", r.body)
	}
	expect(t, f.post("billing", billing("req-10b", "sub_1", "10")), 200, "stale")
	res := f.admin("/admin/resources/billing/sub_1")
	if res.status != 200 || res.body["version"] != "10" || res.body["request_id"] != "req-10" {
		t.Errorf("resource = %d %v", res.status, res.body)
	}
	rec := f.admin("/admin/receipts/billing/req-9")
	if rec.body["decision"] != "stale" || rec.body["latest_version_at_decision"] != "10" || rec.body["ordering_decision"] != "stale" {
		t.Errorf("stale receipt = %v", rec.body)
	}
}

func TestStaleStatusIsConfigurable(t *testing.T) {
	f := newFixture(t, nil)
	send := func(id, at string) response {
		return f.post("strict", fmt.Sprintf(`{"updated_at":%q}`, at), "Idempotency-Key", id, "X-Resource", "cus/42")
	}
	expect(t, send("a", "2026-11-30T10:00:00Z"), 202, "accepted")
	expect(t, send("b", "2026-11-30T09:59:59Z"), 409, "stale")
	expect(t, send("c", "2026-11-30T11:00:00+01:00"), 409, "stale") // the same instant
	expect(t, send("d", "2026-11-30T10:00:00.001Z"), 202, "accepted")
	// A resource holding '/' is reachable percent-encoded.
	if r := f.admin("/admin/resources/strict/cus%2F42"); r.status != 200 || r.body["request_id"] != "d" {
		t.Errorf("resource = %d %v", r.status, r.body)
	}
}

func TestConflict(t *testing.T) {
	f := newFixture(t, nil)
	expect(t, f.post("billing", billing("req-1", "sub_1", 1)), 202, "accepted")
	expect(t, f.post("billing", billing("req-1", "sub_1", 2)), 422, "conflict")
	if r := f.admin("/admin/resources/billing/sub_1"); r.body["version"] != "1" {
		t.Errorf("a conflict moved the latest version: %v", r.body)
	}
}

func TestConcurrentDeliveriesOfOneRequestID(t *testing.T) {
	f := newFixture(t, nil)
	const n = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[any]int{}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := f.post("billing", billing("req-burst", "sub_1", 1), "X-Delivery-Id", fmt.Sprint("d", i))
			mu.Lock()
			counts[r.body["decision"]]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if counts["accepted"] != 1 || counts["duplicate"] != n-1 {
		t.Errorf("decisions = %v, want 1 accepted, %d duplicates", counts, n-1)
	}
}

func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	f := newFixture(t, nil)
	long := strings.Repeat("x", 257)
	longRunes := strings.Repeat("é", 129) // 129 characters, 258 bytes
	tests := []struct {
		name      string
		method    string
		source    string
		body      string
		headers   []string
		status    int
		field     string
		requestID string // must have no receipt afterwards
	}{
		{"unknown source", "POST", "nope", billing("r1", "s", 1), nil, 404, "", "r1"},
		{"unknown source, GET", "GET", "nope", "", nil, 404, "", ""},
		{"GET on a known source", "GET", "billing", "", nil, 405, "", ""},
		{"PUT on a known source", "PUT", "billing", billing("r2", "s", 1), nil, 405, "", "r2"},
		{"not JSON", "POST", "billing", `request_id=r4`, nil, 400, "body", "r4"},
		{"truncated JSON", "POST", "billing", billing("r5", "s", 1)[:30], nil, 400, "body", "r5"},
		{"request ID missing", "POST", "billing", `{"data":{"object":{"id":"s","version":1}}}`, nil, 400, "request_id", ""},
		{"request ID empty", "POST", "billing", billing("", "s", 1), nil, 400, "request_id", ""},
		{"request ID too long", "POST", "billing", billing(long, "s", 1), nil, 400, "request_id", long},
		{"request ID too long in bytes", "POST", "billing", billing(longRunes, "s", 1), nil, 400, "request_id", longRunes},
		{"request ID only whitespace", "POST", "billing", billing(" \u00a0\u3000", "s", 1), nil, 400, "request_id", " \u00a0\u3000"},
		{"request ID with a control character", "POST", "billing", billing("r\u0007x", "s", 1), nil, 400, "request_id", "r\u0007x"},
		{"request ID is an object", "POST", "billing", `{"request_id":{"a":1},"data":{"object":{"id":"s","version":1}}}`, nil, 400, "request_id", ""},
		{"request ID is null", "POST", "billing", `{"request_id":null,"data":{"object":{"id":"s","version":1}}}`, nil, 400, "request_id", ""},
		{"resource missing", "POST", "billing", `{"request_id":"r6","data":{"object":{"version":1}}}`, nil, 400, "resource", "r6"},
		{"resource empty", "POST", "billing", billing("r7", "", 1), nil, 400, "resource", "r7"},
		{"version missing", "POST", "billing", `{"request_id":"r8","data":{"object":{"id":"s"}}}`, nil, 400, "version", "r8"},
		{"version negative", "POST", "billing", billing("r9", "s", -1), nil, 400, "version", "r9"},
		{"version fractional", "POST", "billing", billing("r10", "s", 1.5), nil, 400, "version", "r10"},
		{"version not a number", "POST", "billing", billing("r11", "s", "ten"), nil, 400, "version", "r11"},
		{"version not a timestamp", "POST", "strict", `{"updated_at":"yesterday"}`, []string{"Idempotency-Key", "r12", "X-Resource", "s"}, 400, "version", "r12"},
		{"header request ID missing", "POST", "strict", `{"updated_at":"2026-11-30T10:00:00Z"}`, []string{"X-Resource", "s"}, 400, "request_id", ""},
		{"header resource missing", "POST", "strict", `{"updated_at":"2026-11-30T10:00:00Z"}`, []string{"Idempotency-Key", "r13"}, 400, "resource", "r13"},
		{"delivery ID too long", "POST", "billing", billing("r14", "s", 1), []string{"X-Delivery-Id", long}, 400, "delivery_id", "r14"},
		{"gzip body", "POST", "billing", gzipped(t, billing("r15", "s", 1)), []string{"Content-Encoding", "gzip"}, 415, "Content-Encoding", "r15"},
		{"body that is not the gzip it claims", "POST", "billing", billing("r16", "s", 1), []string{"Content-Encoding", "gzip"}, 415, "Content-Encoding", "r16"},
		{"request ID a lone surrogate", "POST", "billing", `{"request_id":"\ud800","data":{"object":{"id":"s","version":1}}}`, nil, 400, "request_id", ""},
		{"version too long", "POST", "billing", billing("r17", "s", strings.Repeat("0", 300)+"1"), nil, 400, "version", "r17"},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, "/hooks/"+tt.source, strings.NewReader(tt.body))
		for i := 0; i+1 < len(tt.headers); i += 2 {
			req.Header.Set(tt.headers[i], tt.headers[i+1])
		}
		r := f.do(req)
		if r.status != tt.status {
			t.Errorf("%s: status %d %v, want %d", tt.name, r.status, r.body, tt.status)
		}
		if msg, _ := r.body["error"].(string); msg == "" {
			t.Errorf("%s: no error message in %v", tt.name, r.body)
		}
		if tt.field != "" && r.body["field"] != tt.field {
			t.Errorf("%s: field %v, want %s", tt.name, r.body["field"], tt.field)
		}
		if tt.requestID != "" && (f.hasReceipt("billing", tt.requestID) || f.hasReceipt("strict", tt.requestID)) {
			t.Errorf("%s: a receipt was written", tt.name)
		}
	}
	if r := f.admin("/admin/resources/billing/s"); r.status != 404 {
		t.Errorf("bad input moved a latest version: %d %v", r.status, r.body)
	}
	if r := f.post("billing", billing("ok", "s", 1)); r.status != 202 {
		t.Errorf("a good delivery after the bad ones: %d %v", r.status, r.body)
	}
}

// gzipped returns s compressed, as a client that compresses its requests sends it.
func gzipped(t *testing.T, s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := io.WriteString(w, s); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestIdentityEncodingIsNoEncoding(t *testing.T) {
	f := newFixture(t, nil)
	req := httptest.NewRequest(http.MethodPost, "/hooks/billing", strings.NewReader(billing("r1", "s", 1)))
	req.Header.Set("Content-Encoding", "identity")
	expect(t, f.do(req), 202, "accepted")
	// Each Content-Encoding line counts, not only the first.
	req = httptest.NewRequest(http.MethodPost, "/hooks/billing", strings.NewReader(billing("r2", "s", 2)))
	req.Header.Add("Content-Encoding", "identity")
	req.Header.Add("Content-Encoding", "gzip")
	if r := f.do(req); r.status != 415 {
		t.Errorf("Content-Encoding identity, then gzip: %d %v, want 415", r.status, r.body)
	}
}

func TestMethodNotAllowedSaysWhatIs(t *testing.T) {
	f := newFixture(t, nil)
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		// An answer to HEAD has no body: the header says it was refused.
		resp, err := f.server.Public().Test(httptest.NewRequest(method, "/hooks/billing", nil), -1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" || resp.Header.Get("Webhook-Decision") != "rejected" {
			t.Errorf("%s: got %d Allow=%q Webhook-Decision=%q", method, resp.StatusCode, resp.Header.Get("Allow"), resp.Header.Get("Webhook-Decision"))
		}
	}
}

func TestArrayIndexSelectorAndUnversionedSource(t *testing.T) {
	f := newFixture(t, nil)
	r := f.post("plain", `{"items":[{"id":"evt_1"}]}`)
	expect(t, r, 202, "accepted")
	if r.body["resource"] != nil || r.body["latest_version"] != nil {
		t.Errorf("unversioned answer = %v", r.body)
	}
	if !f.hasReceipt("plain", "evt_1") {
		t.Error("no receipt for evt_1")
	}
}

// A selector of several places takes the first that holds a value: an
// absent or empty one falls through, a bad one is refused where it is met.
func TestSelectorAlternatives(t *testing.T) {
	f := newFixtureFor(t, `
sources:
  - name: s
    request_id: json:event.id|header:X-Event-Id|json:id
    delivery_id: header:X-Delivery-Id|header:X-Attempt-Id
`, nil)
	for _, tc := range []struct {
		name, body      string
		headers         []string
		status          int
		request, dlv    string
		field, decision string
	}{
		{"first place", `{"event":{"id":"e1"},"id":"x"}`, []string{"X-Event-Id", "h1", "X-Delivery-Id", "d1", "X-Attempt-Id", "a1"}, 202, "e1", "d1", "", "accepted"},
		{"second place", `{"id":"x"}`, []string{"X-Event-Id", "h2", "X-Attempt-Id", "a2"}, 202, "h2", "a2", "", "accepted"},
		{"third place", `{"id":"j3"}`, nil, 202, "j3", "", "", "accepted"},
		{"empty places fall through", `{"event":{"id":""},"id":"j4"}`, []string{"X-Event-Id", ""}, 202, "j4", "", "", "accepted"},
		{"none", `{"other":1}`, nil, 400, "", "", "request_id", ""},
		{"a bad value is not skipped", `{"event":{"id":{"n":1}},"id":"j5"}`, nil, 400, "", "", "request_id", ""},
	} {
		r := f.post("s", tc.body, tc.headers...)
		if r.status != tc.status {
			t.Errorf("%s: %d %v, want %d", tc.name, r.status, r.body, tc.status)
			continue
		}
		if tc.status != 202 {
			if r.body["field"] != tc.field {
				t.Errorf("%s: field %v, want %s", tc.name, r.body["field"], tc.field)
			}
			continue
		}
		want := map[string]any{"request_id": tc.request, "decision": tc.decision, "delivery_id": nil}
		if tc.dlv != "" {
			want["delivery_id"] = tc.dlv
		}
		for k, v := range want {
			if r.body[k] != v {
				t.Errorf("%s: %s = %v, want %v", tc.name, k, r.body[k], v)
			}
		}
	}
}

// Paths are read literally, whatever gjson and sjson take as syntax, both
// in selectors and in fingerprint_exclude.
func TestPathsAreLiteral(t *testing.T) {
	f := newFixtureFor(t, `
sources:
  - name: s
    request_id: json::id
    fingerprint_exclude: [":sent", "m.:s", "a*", "q?"]
`, nil)
	body := func(n int) string {
		return fmt.Sprintf(`{":id":"r1",":sent":%d,"m":{":s":%d},"a*":%d,"q?":%d,"ab":1,"qr":1}`, n, n, n, n)
	}
	expect(t, f.post("s", body(1)), 202, "accepted")
	expect(t, f.post("s", body(2)), 200, "duplicate")
	expect(t, f.post("s", strings.Replace(body(2), `"ab":1`, `"ab":2`, 1)), 422, "conflict")
}

func TestStorageUnavailableIs503(t *testing.T) {
	f := newFixture(t, nil)
	f.store.Close()
	r := f.post("billing", billing("r1", "s", 1))
	if r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Errorf("got %d %v Retry-After=%q, want 503 with Retry-After", r.status, r.body, r.header.Get("Retry-After"))
	}
	if r := f.do(httptest.NewRequest(http.MethodGet, "/readyz", nil)); r.status != 503 {
		t.Errorf("readyz with a closed store: %d", r.status)
	}
	if r := f.do(httptest.NewRequest(http.MethodGet, "/healthz", nil)); r.status != 200 {
		t.Errorf("healthz: %d", r.status)
	}
}

// A store's error may name its files and the system's error: the caller
// gets the message, the log gets the cause.
func TestUnavailableHidesItsCause(t *testing.T) {
	f := newFixture(t, func(d Decider) Decider { return failing{d} })
	r := f.post("billing", billing("r1", "s", 1))
	if r.status != 503 || r.body["error"] != "storage unavailable" {
		t.Errorf("got %d %v, want 503 saying only that storage is unavailable", r.status, r.body)
	}
}

type failing struct{ Decider }

func (failing) Decide(context.Context, webhookd.Delivery) (webhookd.Outcome, error) {
	return webhookd.Outcome{}, &webhookd.Error{Code: webhookd.EUNAVAILABLE, Message: "storage unavailable", Err: errors.New("sync /var/lib/webhookd/000001.vlog: no space left on device")}
}

func TestNotReadyWhileShuttingDown(t *testing.T) {
	f := newFixture(t, nil)
	if r := f.do(httptest.NewRequest(http.MethodGet, "/readyz", nil)); r.status != 200 {
		t.Fatalf("readyz before shutdown: %d", r.status)
	}
	f.server.Shutdown(context.Background())
	if r := f.do(httptest.NewRequest(http.MethodGet, "/readyz", nil)); r.status != 503 {
		t.Errorf("readyz during shutdown: %d, want 503", r.status)
	}
}

// panicky is a Decider that fails the way a bug would.
// rejections records the rejections a gateway counts.
type rejections struct {
	nopMetrics
	mu  sync.Mutex
	got []string
}

func (r *rejections) Rejected(source, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, source+"/"+reason)
}

type panicky struct{ Decider }

func (p panicky) Decide(ctx context.Context, d webhookd.Delivery) (webhookd.Outcome, error) {
	if d.RequestID == "boom" {
		panic("bug")
	}
	return p.Decider.Decide(ctx, d)
}

func TestPanicIs500AndTheServerLivesOn(t *testing.T) {
	f := newFixture(t, func(d Decider) Decider { return panicky{d} })
	m := &rejections{}
	f.server.Metrics = m
	if r := f.post("billing", billing("boom", "s", 1)); r.status != 500 || r.body["error"] == "" {
		t.Errorf("panic: %d %v", r.status, r.body)
	}
	if !slices.Equal(m.got, []string{"billing/internal"}) {
		t.Errorf("rejections counted: %v, want the panic as billing/internal", m.got)
	}
	expect(t, f.post("billing", billing("fine", "s", 1)), 202, "accepted")
}

func TestAdminNeedsToken(t *testing.T) {
	f := newFixture(t, nil)
	f.post("billing", billing("req-1", "s", 1))
	for _, auth := range []string{"", "Bearer wrong", "t0ken", "Basic t0ken", "Bearer  t0ken", "Bearert0ken"} {
		req := httptest.NewRequest(http.MethodGet, "/admin/receipts/billing/req-1", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if r := f.do(req); r.status != 401 {
			t.Errorf("Authorization %q: %d, want 401", auth, r.status)
		}
	}
	for _, auth := range []string{"Bearer t0ken", "bearer t0ken", "BEARER t0ken"} {
		req := httptest.NewRequest(http.MethodGet, "/admin/receipts/billing/req-1", nil)
		req.Header.Set("Authorization", auth)
		if r := f.do(req); r.status != 200 {
			t.Errorf("Authorization %q: %d, want 200", auth, r.status)
		}
	}
	if r := f.admin("/admin/receipts/billing/nope"); r.status != 404 {
		t.Errorf("unknown receipt: %d", r.status)
	}
	if r := f.admin("/admin/resources/billing/nope"); r.status != 404 {
		t.Errorf("unknown resource: %d", r.status)
	}
}

// Go's profiler is on the admin listener behind the token. The execution
// trace shows what a CPU profile cannot: how long goroutines wait for a
// thread, and for the network poller to notice them.
func TestProfilerNeedsTheToken(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		path string
		want *regexp.Regexp // the start of the answer
	}{
		{"/debug/pprof/heap?debug=1", regexp.MustCompile(`^heap profile: `)},
		{"/debug/pprof/trace?seconds=0.05", regexp.MustCompile(`^go 1\.\d+ trace\x00`)},
	} {
		if r, _ := f.server.Admin().Test(httptest.NewRequest(http.MethodGet, tc.path, nil), -1); r.StatusCode != 401 {
			t.Errorf("%s without the token: %d, want 401", tc.path, r.StatusCode)
		}
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		req.Header.Set("Authorization", "Bearer t0ken")
		resp, err := f.server.Admin().Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !tc.want.Match(body) {
			t.Errorf("%s with the token: %d %.40q, want 200 and %s", tc.path, resp.StatusCode, body, tc.want)
		}
	}
}

func TestAdminWithoutConfiguredTokenRefusesEverything(t *testing.T) {
	f := newFixtureFor(t, `sources: [{name: a, request_id: "json:id"}]`, nil)
	req := httptest.NewRequest(http.MethodGet, "/admin/receipts/a/x", nil)
	req.Header.Set("Authorization", "Bearer ")
	r := f.do(req)
	msg, _ := r.body["error"].(string)
	if r.status != 401 || !strings.Contains(msg, "set admin.token") || !strings.Contains(msg, "WEBHOOKD_ADMIN_TOKEN") {
		t.Errorf("empty token: %d %q, want 401 naming admin.token and WEBHOOKD_ADMIN_TOKEN", r.status, msg)
	}
}

// A call naming a source that is not configured is refused as unknown,
// rather than answered as if the source had no data; a configured source
// without data answers as before.
func TestAdminRefusesAnUnknownSource(t *testing.T) {
	f := newFixture(t, nil)
	const want = `unknown source "biling": the configured sources are billing, plain, strict`
	for _, call := range []struct{ method, path string }{
		{http.MethodGet, "/admin/receipts/biling/req-1"},
		{http.MethodGet, "/admin/resources/biling/sub_1"},
		{http.MethodPost, "/admin/receipts/biling/req-1/redeliver"},
		{http.MethodGet, "/admin/outbox?source=biling"},
		{http.MethodGet, "/admin/deadletters?source=biling"},
		{http.MethodPost, "/admin/deadletters/biling/default/req-1/retry"},
		{http.MethodDelete, "/admin/deadletters/biling/default/req-1"},
	} {
		req := httptest.NewRequest(call.method, call.path, nil)
		req.Header.Set("Authorization", "Bearer t0ken")
		r := f.do(req)
		if r.status != 404 || r.body["error"] != want || r.body["field"] != "source" {
			t.Errorf("%s %s: %d %v, want 404 %q blaming source", call.method, call.path, r.status, r.body, want)
		}
	}
	if r := f.admin("/admin/receipts/billing/req-1"); r.status != 404 || r.body["error"] == want {
		t.Errorf("a known source's missing receipt: %d %v, want 404 not found", r.status, r.body)
	}
	if r := f.admin("/admin/outbox?source=billing"); r.status != 200 {
		t.Errorf("a known source's empty outbox: %d %v", r.status, r.body)
	}
}

// Many sources are counted rather than listed.
func TestUnknownSourceAmongMany(t *testing.T) {
	var b strings.Builder
	b.WriteString("admin: { token: t0ken }\nsources:\n")
	for i := range 13 {
		fmt.Fprintf(&b, "  - { name: s%02d, request_id: \"json:id\" }\n", i)
	}
	f := newFixtureFor(t, b.String(), nil)
	if r := f.admin("/admin/receipts/nope/x"); r.status != 404 || r.body["error"] != `unknown source "nope": 13 sources are configured` {
		t.Errorf("%d %v", r.status, r.body)
	}
}

// Every JSON answer, the hook's hand-written one included, is one line
// ended by a newline.
func TestJSONAnswersEndWithANewline(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		app  *fiber.App
		req  *http.Request
		auth bool
	}{
		{f.server.Public(), httptest.NewRequest(http.MethodPost, "/hooks/billing", strings.NewReader(billing("req-1", "sub_1", 1))), false},
		{f.server.Public(), httptest.NewRequest(http.MethodPost, "/hooks/billing", strings.NewReader("{")), false},
		{f.server.Public(), httptest.NewRequest(http.MethodPost, "/hooks/nope", strings.NewReader("{}")), false},
		{f.server.Public(), httptest.NewRequest(http.MethodGet, "/healthz", nil), false},
		{f.server.Admin(), httptest.NewRequest(http.MethodGet, "/admin/receipts/billing/req-1", nil), true},
		{f.server.Admin(), httptest.NewRequest(http.MethodGet, "/admin/outbox", nil), true},
		{f.server.Admin(), httptest.NewRequest(http.MethodGet, "/admin/outbox", nil), false},
	} {
		if tc.auth {
			tc.req.Header.Set("Authorization", "Bearer t0ken")
		}
		resp, err := tc.app.Test(tc.req, -1)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.HasSuffix(raw, []byte("}\n")) || bytes.Count(raw, []byte("\n")) != 1 || !json.Valid(raw) {
			t.Errorf("%s %s: %d %q, want one line of JSON ended by a newline", tc.req.Method, tc.req.URL, resp.StatusCode, raw)
		}
	}
}

// A body over max_body is refused by the HTTP server before any route runs,
// which app.Test reports as a transport error: this one goes over loopback.
func TestBodyOverMaxBodyIs413(t *testing.T) {
	f := newFixture(t, nil)
	f.server.publicAddr, f.server.adminAd = "127.0.0.1:0", "127.0.0.1:0"
	if err := f.server.Open(); err != nil {
		t.Fatal(err)
	}
	defer f.server.Shutdown(context.Background())
	body := `{"request_id":"big","pad":"` + strings.Repeat("x", 3000) + `"}`
	resp, err := http.Post("http://"+f.server.PublicAddr()+"/hooks/billing", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		t.Fatalf("413 answer is not JSON: %v", err)
	}
	if want := "body is 3029 bytes; source billing takes at most 2048"; resp.StatusCode != 413 || answer["error"] != want {
		t.Errorf("got %d %v, want 413 saying %q", resp.StatusCode, answer, want)
	}
	if f.hasReceipt("billing", "big") {
		t.Error("a receipt was written for a body over max_body")
	}
}

// A client that connects and sends nothing (a load balancer's TCP check, a
// connection opened ahead of need) must not hold shutdown up until the read
// timeout: shutdown_timeout would run out, intake would report an error and
// the process would linger.
func TestShutdownDoesNotWaitForSilentConnections(t *testing.T) {
	f := newFixture(t, nil)
	f.server.publicAddr, f.server.adminAd = "127.0.0.1:0", "127.0.0.1:0"
	if err := f.server.Open(); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", f.server.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(100 * time.Millisecond) // let the server take the connection
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.server.Shutdown(ctx); err != nil {
		t.Errorf("shutdown with a silent connection open: %v", err)
	}
}

// A request fasthttp cannot parse is answered with its status's name: the
// parser's message quotes the request's bytes, credentials included.
func TestUnparsableRequestIsNotEchoed(t *testing.T) {
	f := newFixture(t, nil)
	f.server.publicAddr, f.server.adminAd = "127.0.0.1:0", "127.0.0.1:0"
	if err := f.server.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.server.Shutdown(context.Background()) })
	conn, err := net.Dial("tcp", f.server.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "POST /hooks/billing HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\nTransfer-Encoding: gzip\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || strings.Contains(string(body), "s3cret") {
		t.Errorf("got %d %s, want 400 without the request's bytes", resp.StatusCode, body)
	}
}

func TestOneLogLinePerDelivery(t *testing.T) {
	f := newFixture(t, nil)
	core, logs := observer.New(zapcore.InfoLevel)
	f.server.logger = zap.New(core)
	f.post("billing", billing("req-log", "sub_1", 1), "X-Delivery-Id", "d1")
	f.post("billing", billing("req-log", "sub_1", 1), "X-Delivery-Id", "d2")
	f.post("billing", billing("", "sub_1", 1))
	want := []map[string]any{
		{"request_id": "req-log", "delivery_id": "d1", "resource": "sub_1", "version": "1", "decision": "accepted", "status": int64(202)},
		{"request_id": "req-log", "delivery_id": "d2", "resource": "sub_1", "version": "1", "decision": "duplicate", "status": int64(200)},
		{"request_id": "", "decision": "rejected", "status": int64(400)},
	}
	lines := logs.FilterMessage("delivery").All()
	if len(lines) != len(want) {
		t.Fatalf("%d delivery lines, want %d: %v", len(lines), len(want), lines)
	}
	for i, line := range lines {
		fields := line.ContextMap()
		if fields["source"] != "billing" || fields["latency"] == nil {
			t.Errorf("line %d: source %v, latency %v", i, fields["source"], fields["latency"])
		}
		for k, v := range want[i] {
			if fields[k] != v {
				t.Errorf("line %d: %s = %v (%T), want %v", i, k, fields[k], fields[k], v)
			}
		}
	}
	if reason := lines[2].ContextMap()["reason"]; reason == nil {
		t.Error("the rejected delivery's line has no reason")
	}
	core, logs = observer.New(zapcore.WarnLevel)
	f.server.logger = zap.New(core)
	f.post("billing", billing("req-quiet", "sub_1", 2))
	if logs.Len() != 0 {
		t.Errorf("at warn level, %d lines logged", logs.Len())
	}
}

// unready is a Decider whose readiness the test sets.
type unready struct {
	Decider
	err atomic.Pointer[webhookd.Error]
}

func (u *unready) Ready() error {
	if err := u.err.Load(); err != nil {
		return err
	}
	return nil
}

// Probes of a gateway that is not ready log when it turns and when it is
// ready again, not every probe.
func TestReadinessLogsTransitions(t *testing.T) {
	var u *unready
	f := newFixture(t, func(d Decider) Decider { u = &unready{Decider: d}; return u })
	core, logs := observer.New(zapcore.InfoLevel)
	f.server.logger = zap.New(core)
	f.server.readiness = ratelog.New(f.server.logger, zapcore.WarnLevel, ratelog.DefaultEvery)
	probe := func() int { return f.do(httptest.NewRequest(http.MethodGet, "/readyz", nil)).status }
	u.err.Store(&webhookd.Error{Code: webhookd.EUNAVAILABLE, Message: "database unavailable"})
	for range 20 {
		if status := probe(); status != 503 {
			t.Fatalf("readyz while the store is not ready: %d, want 503", status)
		}
	}
	u.err.Store(nil)
	if status := probe(); status != 200 {
		t.Fatalf("readyz once the store is ready: %d", status)
	}
	if n := logs.Len(); n != 2 || logs.FilterMessage("not ready").Len() != 1 || logs.FilterMessage("ready again").Len() != 1 {
		t.Errorf("logged %v; want one line as it turned, one as it came back", logs.AllUntimed())
	}
}

// Deliveries refused with 503 while the store is down each have their
// delivery line, and one error line between them, not one each.
func TestUnavailableLogsOnce(t *testing.T) {
	f := newFixture(t, func(d Decider) Decider { return failing{d} })
	core, logs := observer.New(zapcore.InfoLevel)
	f.server.logger = zap.New(core)
	f.server.unavailable = ratelog.New(f.server.logger, zapcore.ErrorLevel, ratelog.DefaultEvery)
	for i := range 20 {
		if r := f.post("billing", billing(fmt.Sprint("req-", i), "sub_1", i+1)); r.status != 503 {
			t.Fatalf("delivery with the store down: %d, want 503", r.status)
		}
	}
	if n := logs.FilterMessage("delivery").Len(); n != 20 {
		t.Errorf("%d delivery lines, want 20", n)
	}
	if n := logs.FilterMessage("request failed").Len(); n != 1 {
		t.Errorf("%d error lines for 20 refusals, want 1", n)
	}
}
