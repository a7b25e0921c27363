package replay

import (
	"testing"
	"time"
)

func TestProgressString(t *testing.T) {
	tests := []struct {
		p    Progress
		want string
	}{
		{Progress{Total: 5000}, "0/5000 sent (0%)  -/s  0 errors  ETA -"},
		{Progress{Sent: 1200, Total: 5000, Mismatches: 3, Expect: true, Elapsed: 5 * time.Second}, "1200/5000 sent (24%)  240/s  3 mismatches  0 errors  ETA 16s"},
		{Progress{Sent: 1, Total: 3, Mismatches: 1, Errors: 1, Expect: true, Elapsed: 2 * time.Second}, "1/3 sent (33%)  0.5/s  1 mismatch  1 error  ETA 4s"},
		{Progress{Sent: 10, Total: 100000, Elapsed: time.Second}, "10/100000 sent (0%)  10/s  0 errors  ETA 2h46m39s"},
		{Progress{Sent: 7, Total: 7, Errors: 2, Elapsed: 700 * time.Millisecond}, "7/7 sent (100%)  10/s  2 errors  done"},
		{Progress{Sent: 3, Total: 9, Elapsed: 0}, "3/9 sent (33%)  -/s  0 errors  ETA -"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("%+v:\n got %q\nwant %q", tt.p, got, tt.want)
		}
	}
}
