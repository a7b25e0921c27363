package dedupe

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/versioning"
)

func TestClassify(t *testing.T) {
	held := &Receipt{PayloadSHA256: "aaa"}
	tests := []struct {
		name        string
		held        *Receipt
		fingerprint string
		want        Outcome
	}{
		{"unseen request ID", nil, "aaa", New},
		{"same payload", held, "aaa", Duplicate},
		{"other payload", held, "bbb", Conflict},
	}
	for _, tt := range tests {
		if got := Classify(tt.held, tt.fingerprint); got != tt.want {
			t.Errorf("%s: Classify = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	a := []byte(`{"request_id":"r1","sent_at":"10:00","data":{"id":"x","meta":{"try":1}}}`)
	b := []byte(`{"request_id":"r1","sent_at":"10:05","data":{"id":"x","meta":{"try":2}}}`)
	fa, err := Fingerprint(a, []string{"sent_at", "data.meta.try"})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := Fingerprint(b, []string{"sent_at", "data.meta.try"})
	if err != nil {
		t.Fatal(err)
	}
	if fa != fb {
		t.Errorf("excluded fields changed the fingerprint: %s != %s", fa, fb)
	}
	raw, _ := Fingerprint(a, nil)
	rawB, _ := Fingerprint(b, nil)
	if raw == rawB {
		t.Error("without excludes, different bodies have the same fingerprint")
	}
	// SHA-256 of "abc", a published test vector.
	if got, _ := Fingerprint([]byte("abc"), nil); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("Fingerprint(abc) = %s", got)
	}
}

func TestRecordIsBounded(t *testing.T) {
	var r Receipt
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for i := 0; i < MaxDeliveries+10; i++ {
		r.Record(Delivery{DeliveryID: fmt.Sprint("d", i), ReceivedAt: start.Add(time.Duration(i) * time.Second), Decision: webhookd.Duplicate})
	}
	if r.Attempts != MaxDeliveries+10 {
		t.Errorf("Attempts = %d, want %d", r.Attempts, MaxDeliveries+10)
	}
	if len(r.Deliveries) != MaxDeliveries {
		t.Fatalf("len(Deliveries) = %d, want %d", len(r.Deliveries), MaxDeliveries)
	}
	if r.Deliveries[0].DeliveryID != "d0" {
		t.Errorf("first delivery = %s, want d0 kept", r.Deliveries[0].DeliveryID)
	}
	if last := r.Deliveries[MaxDeliveries-1].DeliveryID; last != fmt.Sprint("d", MaxDeliveries+9) {
		t.Errorf("last delivery = %s", last)
	}
	if !r.LastSeen.Equal(start.Add(time.Duration(MaxDeliveries+9) * time.Second)) {
		t.Errorf("LastSeen = %v", r.LastSeen)
	}
}

func TestResidualRiskSpeaksOfEachRoute(t *testing.T) {
	r := Receipt{Decision: webhookd.Accepted, Resource: "x", Routes: []webhookd.RouteStatus{
		{Route: "billing", ForwardStatus: webhookd.ForwardStatus{State: webhookd.ForwardPending}},
		{Route: "audit", ForwardStatus: webhookd.ForwardStatus{State: webhookd.ForwardDead}},
	}}
	risks := strings.Join(r.ResidualRisk(), "\n")
	for _, want := range []string{"route billing: forwarding is at least once", "Idempotency-Key", "route audit: forwarding gave up"} {
		if !strings.Contains(risks, want) {
			t.Errorf("residual risk %q does not say %q", risks, want)
		}
	}
	r.Routes, r.Unrouted = nil, true
	if risks := strings.Join(r.ResidualRisk(), "\n"); !strings.Contains(risks, "matched no route") {
		t.Errorf("residual risk of a delivery routed nowhere: %q", risks)
	}
}

func TestResidualRiskOfATieNamesArrivalOrder(t *testing.T) {
	tie := Receipt{Decision: webhookd.Accepted, Resource: "x", OrderingDecision: string(versioning.Tie)}
	newer := Receipt{Decision: webhookd.Accepted, Resource: "x", OrderingDecision: string(versioning.Newer)}
	says := func(r Receipt) bool {
		return slices.ContainsFunc(r.ResidualRisk(), func(risk string) bool { return strings.Contains(risk, "ordered by arrival") })
	}
	if !says(tie) || says(newer) {
		t.Errorf("arrival order named for a tie %v, for a newer version %v; want only the tie", says(tie), says(newer))
	}
}
