package dedupe

import (
	"slices"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/versioning"
)

func TestDecide(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	delivery := func(version uint64, forward bool) *webhookd.Delivery {
		d := &webhookd.Delivery{Source: "s", RequestID: "r", DeliveryID: "d2", Resource: "res", Fingerprint: "aaa", ReceivedAt: at, Forward: forward}
		if forward {
			d.Routes = []string{"a", "b"}
		}
		if version > 0 {
			d.Version, d.VersionOrder = string(rune('0'+version)), version
		}
		return d
	}
	// tied is a forwarded delivery of a source that accepts ties.
	tied := func(version uint64) *webhookd.Delivery {
		d := delivery(version, true)
		d.AcceptTies = true
		return d
	}
	v3 := &versioning.Latest{Version: "3", Order: 3, RequestID: "q"}
	held := &Receipt{Source: "s", RequestID: "r", Resource: "res", Version: "5", Decision: webhookd.Accepted, PayloadSHA256: "aaa",
		Attempts: 1, Deliveries: []Delivery{{DeliveryID: "d1", Decision: webhookd.Accepted}},
		Routes: []webhookd.RouteStatus{{Route: "a", ForwardStatus: webhookd.ForwardStatus{State: webhookd.ForwardDelivered}}}}
	other := *held
	other.PayloadSHA256 = "bbb"
	tests := []struct {
		name     string
		held     *Receipt
		latest   *versioning.Latest
		d        *webhookd.Delivery
		decision webhookd.Decision
		ordering versioning.Ordering // of a new receipt
		latestIs string              // the outcome's latest version
		moves    bool                // the latest version becomes d's
		enqueue  bool
	}{
		{"new, unversioned", nil, nil, delivery(0, false), webhookd.Accepted, versioning.Unordered, "", false, false},
		{"new, unversioned, forwarded", nil, nil, delivery(0, true), webhookd.Accepted, versioning.Unordered, "", false, true},
		{"new, first version", nil, nil, delivery(4, false), webhookd.Accepted, versioning.First, "4", true, false},
		{"new, first version, forwarded", nil, nil, delivery(4, true), webhookd.Accepted, versioning.First, "4", true, true},
		{"new, newer version", nil, v3, delivery(4, true), webhookd.Accepted, versioning.Newer, "4", true, true},
		{"new, same version", nil, v3, delivery(3, true), webhookd.Stale, versioning.Stale, "3", false, false},
		{"new, older version", nil, v3, delivery(2, true), webhookd.Stale, versioning.Stale, "3", false, false},
		{"new, same version, ties accepted", nil, v3, tied(3), webhookd.Accepted, versioning.Tie, "3", true, true},
		{"new, older version, ties accepted", nil, v3, tied(2), webhookd.Stale, versioning.Stale, "3", false, false},
		{"new, newer version, ties accepted", nil, v3, tied(4), webhookd.Accepted, versioning.Newer, "4", true, true},
		{"held, same version, ties accepted", held, v3, tied(3), webhookd.Duplicate, "", "3", false, false},
		{"held, same payload", held, v3, delivery(9, true), webhookd.Duplicate, "", "3", false, false},
		{"held, same payload, no latest", held, nil, delivery(0, true), webhookd.Duplicate, "", "", false, false},
		{"held, other payload", &other, v3, delivery(9, true), webhookd.Conflict, "", "3", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Decide(tt.held, tt.latest, tt.d)
			if p.Outcome.Decision != tt.decision || p.Outcome.LatestVersion != tt.latestIs || p.Enqueue != tt.enqueue {
				t.Errorf("outcome %+v, enqueue %v; want %s, latest %q, enqueue %v", p.Outcome, p.Enqueue, tt.decision, tt.latestIs, tt.enqueue)
			}
			if moved := p.Latest != nil; moved != tt.moves {
				t.Fatalf("latest written: %+v, want moved %v", p.Latest, tt.moves)
			} else if moved && (p.Latest.Version != tt.d.Version || p.Latest.Order != tt.d.VersionOrder || p.Latest.RequestID != "r" || !p.Latest.UpdatedAt.Equal(at)) {
				t.Errorf("latest = %+v", p.Latest)
			}
			r := p.Receipt
			last := r.Deliveries[len(r.Deliveries)-1]
			if last.DeliveryID != "d2" || last.Decision != tt.decision || !r.LastSeen.Equal(at) {
				t.Errorf("last delivery %+v, last seen %v", last, r.LastSeen)
			}
			if tt.held != nil {
				if r.Decision != tt.held.Decision || r.Attempts != 2 || len(r.Deliveries) != 2 || !slices.Equal(r.Routes, tt.held.Routes) {
					t.Errorf("held receipt became %+v", r)
				}
				if tt.held.Attempts != 1 || len(tt.held.Deliveries) != 1 {
					t.Errorf("Decide changed the held receipt: %+v", tt.held)
				}
				return
			}
			var wantRoutes []webhookd.RouteStatus
			if tt.enqueue {
				pending := webhookd.ForwardStatus{State: webhookd.ForwardPending}
				wantRoutes = []webhookd.RouteStatus{{Route: "a", ForwardStatus: pending}, {Route: "b", ForwardStatus: pending}}
			}
			if r.Decision != tt.decision || r.OrderingDecision != string(tt.ordering) || r.DuplicateDecision != New ||
				r.Attempts != 1 || !r.FirstSeen.Equal(at) || r.PayloadSHA256 != "aaa" || !slices.Equal(r.Routes, wantRoutes) || r.Unrouted {
				t.Errorf("new receipt %+v", r)
			}
			if want := Reason(tt.ordering, tt.d.Version, r.LatestVersionAtDecision); r.Reason != want {
				t.Errorf("reason %q, want %q", r.Reason, want)
			}
			if tt.latest != nil && r.LatestVersionAtDecision != tt.latest.Version {
				t.Errorf("latest at decision %q", r.LatestVersionAtDecision)
			}
		})
	}
}

func TestLatestFor(t *testing.T) {
	d := &webhookd.Delivery{Resource: "new", Version: "1"}
	if got := LatestFor(&Receipt{Resource: "held"}, d); got != "held" {
		t.Errorf("redelivery: %q", got)
	}
	if got := LatestFor(nil, d); got != "new" {
		t.Errorf("new versioned: %q", got)
	}
	if got := LatestFor(nil, &webhookd.Delivery{Resource: "new"}); got != "" {
		t.Errorf("new unversioned: %q", got)
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		ordering        versioning.Ordering
		version, latest string
		want            string
	}{
		{versioning.Unordered, "", "", "request ID not seen before; the source has no resource version to order by"},
		{versioning.First, "3", "", "request ID not seen before; first version 3 of the resource"},
		{versioning.Newer, "4", "3", "request ID not seen before; version 4 is newer than the latest accepted version 3"},
		{versioning.Tie, "3", "3", "request ID not seen before; version 3 equals the latest accepted version 3; ties are accepted in arrival order"},
		{versioning.Stale, "2", "3", "request ID not seen before; version 2 is not newer than the latest accepted version 3, so it was recorded and not applied"},
	}
	for _, tt := range tests {
		if got := Reason(tt.ordering, tt.version, tt.latest); got != tt.want {
			t.Errorf("Reason(%s, %q, %q) = %q, want %q", tt.ordering, tt.version, tt.latest, got, tt.want)
		}
	}
}

func TestDecideRoutesAnAcceptedDeliveryNowhereWhenNoRouteMatched(t *testing.T) {
	d := &webhookd.Delivery{Source: "s", RequestID: "r", Fingerprint: "aaa", ReceivedAt: time.Now(), Forward: true}
	p := Decide(nil, nil, d)
	if p.Outcome.Decision != webhookd.Accepted || p.Enqueue || !p.Receipt.Unrouted || len(p.Receipt.Routes) != 0 {
		t.Errorf("plan %+v, receipt %+v; want accepted, not enqueued, routed nowhere", p, p.Receipt)
	}
	d.Forward = false
	if p := Decide(nil, nil, d); p.Enqueue || p.Receipt.Unrouted {
		t.Errorf("a source without routes: plan %+v, receipt %+v", p, p.Receipt)
	}
}
