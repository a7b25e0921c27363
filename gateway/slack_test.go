package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/recording"
	"github.com/webhookd/webhookd/storage"
)

// countingDecider counts the decisions asked of the store: every write of
// the request path goes through Decide.
type countingDecider struct {
	Decider
	calls atomic.Int64
}

func (d *countingDecider) Decide(ctx context.Context, dl webhookd.Delivery) (webhookd.Outcome, error) {
	d.calls.Add(1)
	return d.Decider.Decide(ctx, dl)
}

type memRecorder struct {
	mu      sync.Mutex
	records []recording.Record
}

func (r *memRecorder) Record(rec recording.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
}

// Slack's url_verification and app_rate_limited are answered 200 once their
// signature checks, over real HTTP with a real store, and nothing of them
// is decided, stored, recorded or forwarded; unsigned or badly signed, they
// are refused like any delivery.
func TestSlackHandshakeWritesNothing(t *testing.T) {
	counter := &countingDecider{}
	f := newFixtureFor(t, `
sources:
  - name: slack
    verify: { scheme: slack, secrets: ["`+newSecret+`"] }
    routes: [{ url: "http://127.0.0.1:9/" }]
`, func(d Decider) Decider { counter.Decider = d; return counter })
	rec := &memRecorder{}
	f.server.Recorders = map[string]Recorder{"slack": rec}
	core, logs := observer.New(zapcore.InfoLevel)
	f.server.logger = zap.New(core)
	f.server.publicAddr, f.server.adminAd = "127.0.0.1:0", "127.0.0.1:0"
	if err := f.server.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.server.Shutdown(context.Background()) })

	send := func(body string, sign func(h http.Header)) (int, string, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+f.server.PublicAddr()+"/hooks/slack", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		sign(req.Header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var answer map[string]any
		if err := json.Unmarshal(raw, &answer); err != nil {
			t.Fatalf("answer is not JSON: %q", raw)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), answer
	}
	signed := func(secret, body string) func(h http.Header) {
		return func(h http.Header) { signers["slack"](h, secret, body, time.Now()) }
	}

	const challenge = `{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`
	status, ctype, answer := send(challenge, signed(newSecret, challenge))
	if status != 200 || ctype != "application/json" || len(answer) != 1 || answer["challenge"] != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Errorf("signed url_verification: %d %s %v, want 200 with the challenge", status, ctype, answer)
	}
	const limited = `{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","type":"app_rate_limited","team_id":"T123456","minute_rate_limited":1518467820,"api_app_id":"A123456"}`
	if status, _, answer := send(limited, signed(newSecret, limited)); status != 200 {
		t.Errorf("signed app_rate_limited: %d %v, want 200", status, answer)
	}
	if status, _, answer := send(challenge, func(http.Header) {}); status != 401 || answer["reason"] != "missing_signature" {
		t.Errorf("unsigned url_verification: %d %v, want 401 missing_signature", status, answer)
	}
	if status, _, answer := send(challenge, signed(oldSecret, challenge)); status != 401 || answer["reason"] != "signature_mismatch" {
		t.Errorf("badly signed url_verification: %d %v, want 401 signature_mismatch", status, answer)
	}

	if n := counter.calls.Load(); n != 0 {
		t.Errorf("%d decisions asked of the store, want none", n)
	}
	if entries, _, err := f.store.Outbox(context.Background(), forward.Target{}, storage.Page{}); err != nil || len(entries) != 0 {
		t.Errorf("outbox = %v, %v; want empty", entries, err)
	}
	rec.mu.Lock()
	recorded := len(rec.records)
	rec.mu.Unlock()
	if recorded != 2 {
		t.Errorf("%d requests recorded, want the 2 refusals only", recorded)
	}
	if n := logs.FilterMessage("slack url_verification answered").Len(); n != 1 {
		t.Errorf("%d url_verification lines logged, want 1", n)
	}
	if lines := logs.FilterLevelExact(zapcore.WarnLevel).FilterField(zap.String("team_id", "T123456")).Len(); lines != 1 {
		t.Errorf("%d app_rate_limited warnings naming the team, want 1", lines)
	}

	// The source takes events as before.
	const event = `{"type":"event_callback","event_id":"Ev0001","event":{"type":"app_mention"}}`
	if status, _, answer := send(event, signed(newSecret, event)); status != 202 || answer["request_id"] != "Ev0001" {
		t.Errorf("event_callback: %d %v, want 202 accepted", status, answer)
	}
	// A url_verification without a usable challenge is not answered as one.
	const noChallenge = `{"type":"url_verification","challenge":""}`
	if status, _, answer := send(noChallenge, signed(newSecret, noChallenge)); status != 400 || answer["field"] != "request_id" {
		t.Errorf("url_verification without a challenge: %d %v, want 400", status, answer)
	}
}
