package storetest

import (
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
)

// traceparent is a W3C trace context as the intake stores it.
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// testTraceKept follows one entry's trace context through everything the
// outbox does to it: every attempt, on any forwarder, after a reopen, a
// dead letter retried, alone or in bulk, or a request redelivered, is a
// span of the trace that accepted it.
func testTraceKept(t *testing.T, open Open) {
	f := newFixture(t, open)
	d := f.delivery("traced", "", 0, `{"id":"traced"}`)
	d.Trace = traceparent
	if out := f.decide(d); out.Decision != webhookd.Accepted {
		t.Fatalf("decided %s", out.Decision)
	}
	f.accept("untraced", "", 0)
	wantTrace := func(step string, e *forward.Entry) {
		t.Helper()
		want := traceparent
		if e.RequestID == "untraced" {
			want = ""
		}
		if e.Trace != want {
			t.Errorf("%s: %s has trace %q, want %q", step, e.RequestID, e.Trace, want)
		}
	}
	claimOne := func(step string) forward.Claim {
		t.Helper()
		for _, c := range f.claim("w", 10, time.Minute) {
			if c.RequestID == "traced" {
				wantTrace(step, &c.Entry)
				return c
			}
			f.settle(c, webhookd.ForwardDelivered)
		}
		t.Fatalf("%s: traced not claimed", step)
		return forward.Claim{}
	}
	entries, err := f.outbox(target)
	if err != nil || len(entries) != 2 {
		t.Fatalf("outbox %+v, %v", entries, err)
	}
	for i := range entries {
		wantTrace("outbox", &entries[i])
	}
	f.settle(claimOne("first claim"), webhookd.ForwardRetrying)
	f.clock.Advance(time.Hour / 2)
	f.reopen()
	f.settle(claimOne("claim after reopen"), webhookd.ForwardDead)
	dead, err := f.deadLetters(target)
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters %+v, %v", dead, err)
	}
	wantTrace("dead letter", &dead[0])
	if err := f.b.RetryDeadLetter(ctx, target, "traced"); err != nil {
		t.Fatal(err)
	}
	f.settle(claimOne("claim of the retried dead letter"), webhookd.ForwardDelivered)
	if err := f.b.Redeliver(ctx, source, "traced", route); err != nil {
		t.Fatal(err)
	}
	f.settle(claimOne("claim of the redelivery"), webhookd.ForwardDead)
	if done, refused := f.retryAll(storage.DeadLetterQuery{Target: target}, 10); done != 1 || refused != 0 {
		t.Fatalf("bulk retry: %d done, %d refused", done, refused)
	}
	f.settle(claimOne("claim after a bulk retry"), webhookd.ForwardDelivered)
}
