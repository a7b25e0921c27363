package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/webhookd/webhookd/recording"
)

// Report is what a replay did: every line sent, and a summary.
type Report struct {
	Target  string    `json:"target"`
	Expect  bool      `json:"expect"`
	Started time.Time `json:"started"`
	Summary Summary   `json:"summary"`
	Results []Result  `json:"results"`
}

// Result is one line replayed.
type Result struct {
	Line   int    `json:"line"`
	Source string `json:"source,omitempty"`
	// RequestID is the request ID the target's answer names, or, for a
	// line without a decided answer, the one the target's configuration
	// reads from the line (--config); "" when neither says.
	RequestID        string `json:"request_id,omitempty"`
	Method           string `json:"method"`
	Path             string `json:"path"`
	ExpectedDecision string `json:"expected_decision,omitempty"`
	ExpectedStatus   int    `json:"expected_status,omitempty"`
	// Decision is the target's decision, "rejected" for an error answer,
	// or "error" when there was no usable answer (see Error).
	Decision  string        `json:"decision"`
	Status    int           `json:"status,omitempty"` // 0 when no answer came
	Error     string        `json:"error,omitempty"`
	Mismatch  bool          `json:"mismatch,omitempty"`
	Latency   time.Duration `json:"-"`
	LatencyMS float64       `json:"latency_ms"`
}

func (r *Result) setLatency(d time.Duration) {
	r.Latency, r.LatencyMS = d, ms(d)
}

// Summary counts a replay's results.
type Summary struct {
	Deliveries int       `json:"deliveries"`
	Outcomes   []Outcome `json:"outcomes"`
	Errors     int       `json:"errors"`
	Mismatches int       `json:"mismatches"`
	ElapsedMS  float64   `json:"elapsed_ms"`
	PerSecond  float64   `json:"per_second"`
	Latency    Latency   `json:"latency"`
}

// Outcome counts the deliveries that got one decision and status.
type Outcome struct {
	Decision string `json:"decision"`
	Status   int    `json:"status"`
	Count    int    `json:"count"`
}

// Latency holds percentiles of request latency, answered requests only.
type Latency struct {
	P50MS float64 `json:"p50_ms"`
	P90MS float64 `json:"p90_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

func summarize(results []Result, elapsed time.Duration) Summary {
	s := Summary{Deliveries: len(results), ElapsedMS: ms(elapsed)}
	if elapsed > 0 {
		s.PerSecond = float64(len(results)) / elapsed.Seconds()
	}
	counts := map[Outcome]int{}
	var latencies []time.Duration
	for _, r := range results {
		counts[Outcome{Decision: r.Decision, Status: r.Status}]++
		if r.Decision == Failed {
			s.Errors++
		}
		if r.Mismatch {
			s.Mismatches++
		}
		if r.Status != 0 {
			latencies = append(latencies, r.Latency)
		}
	}
	for o, n := range counts {
		o.Count = n
		s.Outcomes = append(s.Outcomes, o)
	}
	slices.SortFunc(s.Outcomes, func(a, b Outcome) int {
		if c := decisionRank(a.Decision) - decisionRank(b.Decision); c != 0 {
			return c
		}
		if c := strings.Compare(a.Decision, b.Decision); c != 0 {
			return c
		}
		return a.Status - b.Status
	})
	slices.Sort(latencies)
	s.Latency = Latency{
		P50MS: ms(percentile(latencies, 0.50)),
		P90MS: ms(percentile(latencies, 0.90)),
		P99MS: ms(percentile(latencies, 0.99)),
		MaxMS: ms(percentile(latencies, 1)),
	}
	return s
}

// decisionRank orders the table as docs/decisions.md lists decisions.
func decisionRank(d string) int {
	if i := slices.Index([]string{"accepted", "duplicate", "stale", "conflict", recording.Rejected, Failed}, d); i >= 0 {
		return i
	}
	return 6
}

// percentile returns the nearest-rank p-th percentile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// Err returns nil when every line got an answer and, with Expect, the
// answer each line expects; otherwise an error wrapping ErrFailed that
// counts what went wrong.
func (r *Report) Err() error {
	s := r.Summary
	if s.Mismatches == 0 && s.Errors == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d mismatches, %d errors in %d deliveries", ErrFailed, s.Mismatches, s.Errors, s.Deliveries)
}

// maxRows bounds the mismatch and error rows the text summary prints; the
// JSON report has them all.
const maxRows = 50

// WriteText writes the summary table, then a row per mismatch and per
// error.
func (r *Report) WriteText(w io.Writer) error {
	s := r.Summary
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "replayed %d deliveries to %s in %s (%.1f/s)\n\n", s.Deliveries, r.Target, time.Duration(s.ElapsedMS*float64(time.Millisecond)).Round(time.Millisecond), s.PerSecond)
	fmt.Fprintln(tw, "DECISION\tSTATUS\tCOUNT")
	for _, o := range s.Outcomes {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", o.Decision, statusText(o.Status), o.Count)
	}
	fmt.Fprintf(tw, "\nlatency\tp50 %gms\tp90 %gms\tp99 %gms\tmax %gms\n", s.Latency.P50MS, s.Latency.P90MS, s.Latency.P99MS, s.Latency.MaxMS)
	if r.Expect {
		fmt.Fprintf(tw, "mismatches\t%d\n", s.Mismatches)
	}
	fmt.Fprintf(tw, "errors\t%d\n", s.Errors)

	if s.Mismatches > 0 {
		fmt.Fprintln(tw, "\nmismatches:\nLINE\tREQUEST_ID\tREQUEST\tEXPECTED\tGOT")
		rows := 0
		for _, res := range r.Results {
			if !res.Mismatch {
				continue
			}
			if rows++; rows > maxRows {
				fmt.Fprintf(tw, "...\t%d more in the JSON report\n", s.Mismatches-maxRows)
				break
			}
			got := res.Decision + " " + statusText(res.Status)
			fmt.Fprintf(tw, "%d\t%s\t%s %s\t%s\t%s\n", res.Line, orDash(res.RequestID), res.Method, res.Path, expectation(res), got)
		}
	}
	if s.Errors > 0 {
		fmt.Fprintln(tw, "\nerrors:\nLINE\tREQUEST_ID\tREQUEST\tERROR")
		rows := 0
		for _, res := range r.Results {
			if res.Decision != Failed {
				continue
			}
			if rows++; rows > maxRows {
				fmt.Fprintf(tw, "...\t%d more in the JSON report\n", s.Errors-maxRows)
				break
			}
			fmt.Fprintf(tw, "%d\t%s\t%s %s\t%s\n", res.Line, orDash(res.RequestID), res.Method, res.Path, res.Error)
		}
	}
	return tw.Flush()
}

func expectation(r Result) string {
	d, s := r.ExpectedDecision, statusText(r.ExpectedStatus)
	if d == "" {
		d = "*"
	}
	if r.ExpectedStatus == 0 {
		s = "*"
	}
	return d + " " + s
}

// orDash shows an unknown value in a table.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func statusText(status int) string {
	if status == 0 {
		return "-"
	}
	return fmt.Sprint(status)
}

// WriteFile writes the report as indented JSON.
func (r *Report) WriteFile(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// Failed is the decision a replay reports for a line that got no usable
// answer: the target was down, or answered something that is not
// webhookd's.
const Failed = "error"
