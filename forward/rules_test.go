package forward

import (
	"slices"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/versioning"
)

func TestApply(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	next := at.Add(time.Minute)
	e := Entry{Source: "s", RequestID: "r", Attempts: 1, Body: []byte("{}")}
	tests := []struct {
		name     string
		body     []byte
		r        Result
		move     Move
		lost     bool
		delivery bool
	}{
		{"delivered", e.Body, Result{State: webhookd.ForwardDelivered, Attempts: 2, Status: 200, At: at}, Remove, false, true},
		{"superseded", e.Body, Result{State: webhookd.ForwardSuperseded, Attempts: 1, At: at}, Remove, false, false},
		{"retrying", e.Body, Result{State: webhookd.ForwardRetrying, Attempts: 2, Status: 503, Error: "busy", At: at, NextAttemptAt: next}, Reschedule, false, false},
		{"dead", e.Body, Result{State: webhookd.ForwardDead, Attempts: 2, Status: 400, Error: "bad", At: at}, Bury, false, false},
		{"dead, payload gone", nil, Result{State: webhookd.ForwardDead, Attempts: 1, Error: "expired", At: at}, Bury, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := e
			in.Body = tt.body
			eff := Apply(in, tt.r)
			if eff.Move != tt.move || eff.Status.State != tt.r.State || eff.Status.Attempts != tt.r.Attempts || eff.Status.LastStatus != tt.r.Status || eff.Status.LastError != tt.r.Error {
				t.Fatalf("effect %+v", eff)
			}
			if (eff.Status.DeliveredAt != nil) != tt.delivery {
				t.Errorf("delivered at %v", eff.Status.DeliveredAt)
			}
			switch tt.move {
			case Reschedule:
				if !eff.Entry.NextAttemptAt.Equal(next) || eff.Entry.Attempts != 2 || eff.Entry.Body != nil || eff.Status.NextAttemptAt == nil {
					t.Errorf("rescheduled entry %+v, status %+v", eff.Entry, eff.Status)
				}
			case Bury:
				if eff.Entry.DeadAt == nil || eff.Entry.BodyLost != tt.lost || string(eff.Entry.Body) != string(tt.body) || eff.Entry.Attempts != tt.r.Attempts {
					t.Errorf("dead letter %+v", eff.Entry)
				}
			}
		})
	}
}

func TestRequeue(t *testing.T) {
	now := time.Now()
	dead := now.Add(-time.Hour)
	e, status := Requeue(Entry{Attempts: 5, LastStatus: 500, LastError: "x", DeadAt: &dead, Body: []byte("b")}, now)
	if e.Attempts != 0 || e.LastStatus != 0 || e.LastError != "" || e.DeadAt != nil || !e.NextAttemptAt.Equal(now) || string(e.Body) != "b" || status.State != webhookd.ForwardPending {
		t.Errorf("requeued %+v, %+v", e, status)
	}
}

func TestEligibility(t *testing.T) {
	first := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	accepted := func(state webhookd.ForwardState) *dedupe.Receipt {
		return &dedupe.Receipt{Source: "s", Decision: webhookd.Accepted, FirstSeen: first,
			Routes: []webhookd.RouteStatus{{Route: "a", ForwardStatus: webhookd.ForwardStatus{State: state}}}}
	}
	conflict := func(what string, err error) {
		t.Helper()
		if webhookd.ErrorCode(err) != webhookd.ECONFLICT {
			t.Errorf("%s: %v, want conflict", what, err)
		}
	}
	for _, ok := range []webhookd.ForwardState{webhookd.ForwardDelivered, webhookd.ForwardDiscarded, webhookd.ForwardSuperseded} {
		if err := CanRedeliver(accepted(ok), "a"); err != nil {
			t.Errorf("redeliver %s: %v", ok, err)
		}
	}
	for _, no := range []webhookd.ForwardState{webhookd.ForwardPending, webhookd.ForwardRetrying, webhookd.ForwardDead} {
		conflict("redeliver "+string(no), CanRedeliver(accepted(no), "a"))
	}
	if err := CanRedeliver(accepted(webhookd.ForwardDelivered), "b"); webhookd.ErrorCode(err) != webhookd.ENOTFOUND {
		t.Errorf("redeliver to a route it was not forwarded to: %v, want not found", err)
	}
	conflict("redeliver stale", CanRedeliver(&dedupe.Receipt{Decision: webhookd.Stale}, "a"))

	dead := &Entry{Source: "s", Route: "a", RequestID: "r", CreatedAt: first}
	if err := CanRetry(dead, nil); err != nil {
		t.Errorf("retry without a receipt: %v", err)
	}
	if err := CanRetry(dead, accepted(webhookd.ForwardDead)); err != nil {
		t.Errorf("retry with its receipt: %v", err)
	}
	later := accepted(webhookd.ForwardPending)
	later.FirstSeen = first.Add(time.Hour)
	conflict("retry under a later receipt", CanRetry(dead, later))
	conflict("retry without a body", CanRetry(&Entry{BodyLost: true}, nil))

	v2 := &Entry{RequestID: "r2", Resource: "sub", Version: "2"}
	if err := CanResend(v2, &versioning.Latest{RequestID: "r2"}); err != nil {
		t.Errorf("resend the latest: %v", err)
	}
	if err := CanResend(v2, nil); err != nil {
		t.Errorf("resend with no latest: %v", err)
	}
	conflict("resend an older version", CanResend(v2, &versioning.Latest{RequestID: "r3", Version: "3"}))

	if status, ok := Discarded(dead, accepted(webhookd.ForwardDead)); !ok || status.State != webhookd.ForwardDiscarded {
		t.Errorf("discard with its receipt: %+v, %v", status, ok)
	}
	if _, ok := Discarded(dead, later); ok {
		t.Error("discard changed a later receipt's status")
	}
	if _, ok := Discarded(dead, nil); ok {
		t.Error("discard without a receipt changed a status")
	}
	other := *dead
	other.Route = "b"
	if _, ok := Discarded(&other, accepted(webhookd.ForwardDead)); ok {
		t.Error("discard changed the status of a route the receipt was not forwarded to")
	}
}

func TestRedeliverable(t *testing.T) {
	status := func(route string, state webhookd.ForwardState) webhookd.RouteStatus {
		return webhookd.RouteStatus{Route: route, ForwardStatus: webhookd.ForwardStatus{State: state}}
	}
	r := &dedupe.Receipt{Decision: webhookd.Accepted, Routes: []webhookd.RouteStatus{
		status("a", webhookd.ForwardDelivered), status("b", webhookd.ForwardPending), status("c", webhookd.ForwardDiscarded)}}
	if routes, err := Redeliverable(r); err != nil || !slices.Equal(routes, []string{"a", "c"}) {
		t.Errorf("Redeliverable = %v, %v; want a and c", routes, err)
	}
	if routes, err := RedeliverTo(r, ""); err != nil || !slices.Equal(routes, []string{"a", "c"}) {
		t.Errorf("RedeliverTo every route = %v, %v; want a and c", routes, err)
	}
	if routes, err := RedeliverTo(r, "c"); err != nil || !slices.Equal(routes, []string{"c"}) {
		t.Errorf("RedeliverTo c = %v, %v; want c", routes, err)
	}
	if _, err := RedeliverTo(r, "b"); webhookd.ErrorCode(err) != webhookd.ECONFLICT {
		t.Errorf("RedeliverTo a pending route: %v, want a conflict", err)
	}
	r.Routes = r.Routes[1:2]
	if routes, err := Redeliverable(r); webhookd.ErrorCode(err) != webhookd.ECONFLICT || routes != nil {
		t.Errorf("Redeliverable of a pending route = %v, %v; want a conflict", routes, err)
	}
	r.Routes = nil
	if _, err := Redeliverable(r); webhookd.ErrorCode(err) != webhookd.ECONFLICT {
		t.Errorf("Redeliverable without routes: %v, want a conflict", err)
	}
	if _, err := Redeliverable(&dedupe.Receipt{Decision: webhookd.Stale}); webhookd.ErrorCode(err) != webhookd.ECONFLICT {
		t.Errorf("Redeliverable of a stale request: %v, want a conflict", err)
	}
}
