package forward

import (
	"testing"
	"time"
)

func TestGrantUnderTheRate(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	r := Rate{Limit: 10, Burst: 5}
	var s RouteState
	steps := []struct {
		at    time.Duration
		n     int
		grant int
	}{
		{0, 8, 5},                       // a full bucket: the burst
		{0, 8, 0},                       // empty
		{100 * time.Millisecond, 8, 1},  // one token a tenth of a second
		{150 * time.Millisecond, 8, 0},  // half a token
		{200 * time.Millisecond, 8, 1},  // the other half
		{10 * time.Second, 3, 3},        // refilled to the burst, not beyond
		{10 * time.Second, 8, 2},        // what is left of it
		{20 * time.Second, 0, 0},        // asking for none takes none
		{20 * time.Second, 100, 5},      // still the burst
		{20*time.Second + 1, 1, 0},      // no time, no token
		{21 * time.Second, 100, 5},      // a second fills the burst of 5 at 10/s
		{21*time.Second + 50, 100, 0},   // and empties it
		{22 * time.Second, 100, 5},      // the bucket never holds more than the burst
		{23 * time.Second, 100, 5},      // however long the wait
		{123 * time.Second, 1000000, 5}, // or the ask
	}
	for i, st := range steps {
		if g, probe := s.Grant("a", st.n, r, t0.Add(st.at), time.Minute); g != st.grant || probe {
			t.Errorf("step %d: granted %d (probe %v), want %d", i, g, probe, st.grant)
		}
	}
	var free RouteState
	if g, _ := free.Grant("a", 1000, Rate{}, t0, time.Minute); g != 1000 {
		t.Errorf("no rate: granted %d of 1000", g)
	}
}

func TestReleaseReturnsUnusedTokens(t *testing.T) {
	t0 := time.Now()
	r := Rate{Limit: 1, Burst: 4}
	var s RouteState
	if g, _ := s.Grant("a", 4, r, t0, time.Minute); g != 4 {
		t.Fatalf("granted %d", g)
	}
	s.Release("a", 3, false, r)
	if g, _ := s.Grant("a", 4, r, t0, time.Minute); g != 3 {
		t.Errorf("after 3 released, granted %d, want 3", g)
	}
	s.Release("a", 100, false, r)
	if s.Tokens != 4 {
		t.Errorf("released beyond the burst: %v tokens", s.Tokens)
	}
}

func TestBreaker(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	b := Breaker{Failures: 3, Cooldown: 10 * time.Second, MaxCooldown: 25 * time.Second}
	var s RouteState
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	grant := func(owner string, d time.Duration, n, want int, wantProbe bool) {
		t.Helper()
		if g, probe := s.Grant(owner, n, Rate{}, at(d), time.Minute); g != want || probe != wantProbe {
			t.Fatalf("%s at %v: granted %d probe %v, want %d probe %v (state %+v)", owner, d, g, probe, want, wantProbe, s)
		}
	}
	report := func(up bool, d time.Duration, counted bool, circuit Circuit) {
		t.Helper()
		if c := s.Report(up, b, at(d)); c != counted || s.circuit() != circuit {
			t.Fatalf("report up=%v at %v: counted %v, circuit %s; want %v, %s", up, d, c, s.circuit(), counted, circuit)
		}
	}
	grant("a", 0, 8, 8, false)
	report(false, 0, true, Closed)
	report(false, 0, true, Closed)
	report(true, 0, true, Closed) // a success ends the run
	report(false, 0, true, Closed)
	report(false, 0, true, Closed)
	report(false, time.Second, false, Open) // the third in a row opens it, uncounted
	report(false, time.Second, false, Open) // in flight when it opened: uncounted
	if !s.OpenUntil.Equal(at(11 * time.Second)) {
		t.Fatalf("open until %v, want 10 s after it opened", s.OpenUntil)
	}
	grant("a", 5*time.Second, 8, 0, false)
	grant("a", 11*time.Second, 8, 1, true) // the cool-down is over: one probe
	grant("b", 12*time.Second, 8, 0, false)
	report(false, 12*time.Second, false, Open) // the probe failed: open again, twice as long
	if !s.OpenUntil.Equal(at(32 * time.Second)) {
		t.Fatalf("open until %v, want 20 s after the probe failed", s.OpenUntil)
	}
	grant("b", 32*time.Second, 8, 1, true)
	report(false, 32*time.Second, false, Open)
	if !s.OpenUntil.Equal(at(57 * time.Second)) { // 40 s, capped at 25 s
		t.Fatalf("open until %v, want MaxCooldown after the probe failed", s.OpenUntil)
	}
	grant("a", 57*time.Second, 8, 1, true)
	grant("b", 58*time.Second, 8, 0, false)                 // a probe is out
	grant("b", 57*time.Second+time.Minute, 8, 1, true)      // its owner died: b probes
	s.Release("b", 1, true, Rate{})                         // and found nothing to send
	grant("a", 57*time.Second+time.Minute, 8, 1, true)      // so a may probe at once
	report(true, 58*time.Second+time.Minute, true, Closed)  // the probe went through
	grant("b", 58*time.Second+time.Minute, 8, 8, false)     // closed: everything again
	report(false, 58*time.Second+time.Minute, true, Closed) // a new run starts from none
	if s.Opens != 0 || s.Failures != 1 {
		t.Errorf("after closing: %+v", s)
	}

	off := RouteState{}
	for range 100 {
		if !off.Report(false, Breaker{}, t0) {
			t.Fatal("a failure uncounted with the breaker off")
		}
	}
	paused := RouteState{Paused: true}
	if g, _ := paused.Grant("a", 8, Rate{}, t0, time.Minute); g != 0 {
		t.Errorf("paused: granted %d", g)
	}
}
