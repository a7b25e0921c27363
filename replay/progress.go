package replay

import (
	"fmt"
	"time"
)

// Progress is how far a replay has got, as Options.Progress receives it.
type Progress struct {
	Sent       int // deliveries answered or failed
	Total      int
	Mismatches int
	Errors     int
	Expect     bool // mismatches are only counted with Options.Expect
	Elapsed    time.Duration
}

// String is the progress as one line, e.g.
// "1200/5000 sent (24%)  240/s  3 mismatches  0 errors  ETA 16s".
func (p Progress) String() string {
	s := fmt.Sprintf("%d/%d sent (%d%%)  %s", p.Sent, p.Total, 100*p.Sent/max(p.Total, 1), p.rate())
	if p.Expect {
		s += fmt.Sprintf("  %d %s", p.Mismatches, plural(p.Mismatches, "mismatch", "mismatches"))
	}
	s += fmt.Sprintf("  %d %s", p.Errors, plural(p.Errors, "error", "errors"))
	switch {
	case p.Sent >= p.Total:
		return s + "  done"
	case p.Sent == 0 || p.Elapsed <= 0:
		return s + "  ETA -"
	}
	left := time.Duration(float64(p.Total-p.Sent) * float64(p.Elapsed) / float64(p.Sent))
	return s + "  ETA " + left.Round(time.Second).String()
}

func (p Progress) rate() string {
	if p.Elapsed <= 0 {
		return "-/s"
	}
	r := float64(p.Sent) / p.Elapsed.Seconds()
	if r < 10 {
		return fmt.Sprintf("%.1f/s", r)
	}
	return fmt.Sprintf("%.0f/s", r)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
