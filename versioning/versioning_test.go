package versioning

import (
	"errors"
	"testing"
)

func TestParseInteger(t *testing.T) {
	tests := []struct {
		raw     string
		want    uint64
		wantErr bool
	}{
		{"0", 0, false},
		{"10", 10, false},
		{"18446744073709551615", 1<<64 - 1, false},
		{"18446744073709551616", 0, true},
		{"", 0, true},
		{"-1", 0, true},
		{"+1", 0, true},
		{"1.5", 0, true},
		{"1e3", 0, true},
		{"0x1f", 0, true},
		{" 1", 0, true},
	}
	for _, tt := range tests {
		got, err := Parse(Integer, tt.raw)
		if tt.wantErr {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse(%q) err = %v, want ErrInvalid", tt.raw, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tt.raw, got, err, tt.want)
		}
	}
}

func TestParseTimestampKeepsOrder(t *testing.T) {
	ordered := []string{
		"1900-01-01T00:00:00Z",
		"1969-12-31T23:59:59.999999999Z",
		"1970-01-01T00:00:00Z",
		"2026-11-30T10:00:00Z",
		"2026-11-30T11:00:00.5+01:00", // 10:00:00.5 UTC
		"2026-11-30t10:00:00.6z",      // RFC 3339 allows lower case
		"2026-11-30T10:00:00.600000001Z",
		"2026-11-30T10:00:01Z",
	}
	var prev uint64
	for i, raw := range ordered {
		got, err := Parse(Timestamp, raw)
		if err != nil {
			t.Fatalf("Parse(%q): %v", raw, err)
		}
		if i > 0 && got <= prev {
			t.Errorf("%q does not order after %q", raw, ordered[i-1])
		}
		prev = got
	}
	for _, bad := range []string{"", "2026-11-30", "yesterday", "1600-01-01T00:00:00Z", "1700000000",
		// Go would round these two to one key, and the later would be stale.
		"2026-11-30T10:00:00.0000000001Z", "2026-11-30T10:00:00.0000000002Z",
		"2026-11-30T10:00:00,5Z", // Go's comma, not RFC 3339's
	} {
		if _, err := Parse(Timestamp, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) err = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestParseUnknownFormat(t *testing.T) {
	if _, err := Parse("semver", "1.0.0"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
}

func TestOrder(t *testing.T) {
	latest := &Latest{Version: "10", Order: 10}
	tests := []struct {
		name       string
		latest     *Latest
		order      uint64
		acceptTies bool
		want       Ordering
	}{
		{"new resource", nil, 0, false, First},
		{"new resource, ties accepted", nil, 0, true, First},
		{"greater", latest, 11, false, Newer},
		{"greater, ties accepted", latest, 11, true, Newer},
		{"equal is stale", latest, 10, false, Stale},
		{"equal is a tie where ties are accepted", latest, 10, true, Tie},
		{"lower is stale", latest, 9, false, Stale},
		{"lower is stale where ties are accepted", latest, 9, true, Stale},
		{"zero after ten", latest, 0, true, Stale},
	}
	for _, tt := range tests {
		if got := Order(tt.latest, tt.order, tt.acceptTies); got != tt.want {
			t.Errorf("%s: Order = %s, want %s", tt.name, got, tt.want)
		}
	}
}
