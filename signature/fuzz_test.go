package signature

import (
	"bytes"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Each parser is fuzzed for: no panic, everything accepted obeys the
// grammar, and parse∘format is the identity on what was accepted.

func FuzzParseUnixTimestamp(f *testing.F) {
	f.Add("1614265330", int64(1614265330))
	f.Add("0", int64(0))
	f.Add("01614265330", int64(-1))
	f.Add("+1614265330", int64(maxUnixSeconds))
	f.Add("1614265330.5", int64(maxUnixSeconds+1))
	f.Add("99999999999999999999", int64(-9223372036854775808))
	f.Add("", int64(1))
	f.Fuzz(func(t *testing.T, s string, n int64) {
		ts, err := parseUnixTimestamp(s)
		if err == nil {
			if strings.Trim(s, "0123456789") != "" || (len(s) > 1 && s[0] == '0') {
				t.Fatalf("accepted non-canonical timestamp %q", s)
			}
			if ts.Unix() < 0 || ts.Unix() > maxUnixSeconds {
				t.Fatalf("accepted out-of-range timestamp %q", s)
			}
			if got := formatUnixTimestamp(ts); got != s {
				t.Fatalf("round trip %q -> %q", s, got)
			}
		}
		// Every in-range value is accepted in its canonical spelling.
		if n >= 0 && n <= maxUnixSeconds {
			ts, err := parseUnixTimestamp(strconv.FormatInt(n, 10))
			if err != nil || ts.Unix() != n {
				t.Fatalf("parseUnixTimestamp(%d) = %v, %v", n, ts, err)
			}
		}
	})
}

func FuzzParseMAC(f *testing.F) {
	f.Add("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "sha256=", false)
	f.Add("757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17", "", false)
	f.Add("v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503", "v0=", false)
	f.Add("g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "", true)
	f.Add("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "v1,", true)
	f.Add("g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE", "", true)
	f.Add("g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF=", "", true)
	f.Add("g0hM9SsE+OTPJTGt/tmIKtSyZlE3uF\nJELVlNIOLJ1OE=", "", true)
	f.Add("sha256=", "sha256=", false)
	f.Fuzz(func(t *testing.T, value, prefix string, useBase64 bool) {
		mf := macFormat{prefix: prefix, base64: useBase64}
		mac, err := mf.parse(value)
		if err == nil {
			if len(mac) != sha256.Size {
				t.Fatalf("accepted %d-byte MAC from %q", len(mac), value)
			}
			rest, ok := strings.CutPrefix(value, prefix)
			if !ok {
				t.Fatalf("accepted %q without prefix %q", value, prefix)
			}
			formatted := mf.format(mac)[len(prefix):]
			if useBase64 && formatted != rest || !useBase64 && !strings.EqualFold(formatted, rest) {
				t.Fatalf("round trip %q -> %q", rest, formatted)
			}
		}
		// Every MAC formats to something that parses back to it.
		want := sha256.Sum256([]byte(value))
		got, err := mf.parse(mf.format(want[:]))
		if err != nil || !bytes.Equal(got, want[:]) {
			t.Fatalf("format/parse of %x with %+v: %x, %v", want, mf, got, err)
		}
	})
}

func FuzzParseStripeHeader(f *testing.F) {
	f.Add("t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd")
	f.Add("t=1492774577,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39")
	f.Add("v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,t=1492774577,v1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	f.Add("t=1492774577")
	f.Add("t=1,t=2,v1=00")
	f.Add("t=,v1=")
	f.Add(",,,")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseStripeHeader(s)
		if err != nil {
			return
		}
		if len(h.v1) == 0 {
			t.Fatalf("accepted %q without a v1 signature", s)
		}
		for _, mac := range h.v1 {
			if len(mac) != sha256.Size {
				t.Fatalf("accepted %d-byte v1 in %q", len(mac), s)
			}
		}
		tItems := 0
		for item := range strings.SplitSeq(s, ",") {
			if !strings.Contains(item, "=") {
				t.Fatalf("accepted item %q without = in %q", item, s)
			}
			if strings.HasPrefix(item, "t=") {
				tItems++
			}
		}
		if tItems != 1 {
			t.Fatalf("accepted %q with %d t items", s, tItems)
		}
		again, err := parseStripeHeader(formatStripeHeader(h))
		if err != nil {
			t.Fatalf("formatted header %q does not parse: %v", formatStripeHeader(h), err)
		}
		if !again.timestamp.Equal(h.timestamp) || !equalMACs(again.v1, h.v1) {
			t.Fatalf("round trip of %q changed it to %+v", s, again)
		}
	})
}

func FuzzParseStandardSignatures(f *testing.F) {
	f.Add("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	f.Add("v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	f.Add("v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	f.Add("v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==")
	f.Add("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=,v1,x")
	f.Add("  v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=  ")
	f.Add(",abc")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		macs, err := parseStandardSignatures(s)
		if err != nil {
			return
		}
		v1 := 0
		for entry := range strings.SplitSeq(s, " ") {
			if strings.HasPrefix(entry, "v1,") {
				v1++
			}
		}
		if len(macs) == 0 || len(macs) != v1 {
			t.Fatalf("parsed %d MACs from %q, which has %d v1 entries", len(macs), s, v1)
		}
		for _, mac := range macs {
			if len(mac) != sha256.Size {
				t.Fatalf("accepted %d-byte MAC in %q", len(mac), s)
			}
		}
		again, err := parseStandardSignatures(formatStandardSignatures(macs))
		if err != nil || !equalMACs(again, macs) {
			t.Fatalf("round trip of %q: %x, %v", s, again, err)
		}
	})
}

func equalMACs(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestParseStandardSecret(t *testing.T) {
	for _, tc := range []struct {
		secret string
		key    string // "" means refused
	}{
		{"whsec_YWJjZA==", "abcd"},
		{"whsec_YWJjZA", "abcd"},
		{"whsec_YWJjZA=", ""},
		{"whsec_YWJ\njZA==", ""},
		{"whsec_", ""},
		{"YWJjZA==", ""},
		{"WHSEC_YWJjZA==", ""},
	} {
		key, err := parseStandardSecret(tc.secret)
		if tc.key == "" {
			if err == nil {
				t.Errorf("parseStandardSecret(%q) = %q, want error", tc.secret, key)
			}
			continue
		}
		if err != nil || string(key) != tc.key {
			t.Errorf("parseStandardSecret(%q) = %q, %v, want %q", tc.secret, key, err, tc.key)
		}
	}
}

func TestCheckToleranceFarTimestamps(t *testing.T) {
	// Extreme timestamps must be refused, never wrap into the window.
	now := time.Unix(1773500966, 0)
	for _, ts := range []time.Time{time.Unix(0, 0), time.Unix(maxUnixSeconds, 0)} {
		if checkTolerance("h", ts, now, DefaultTolerance) == nil {
			t.Errorf("timestamp %d accepted at %d", ts.Unix(), now.Unix())
		}
	}
}
