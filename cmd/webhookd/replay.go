package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/recording"
	"github.com/webhookd/webhookd/replay"
)

func newReplayCommand() *cobra.Command {
	var (
		file, target, configPath, rate, source, reportPath string
		progressEvery                                      time.Duration
		opts                                               replay.Options
	)
	cmd := &cobra.Command{
		Use:   "replay --file recording.jsonl --target http://HOST:PORT",
		Short: "Replay recorded deliveries against a webhookd and compare its decisions",
		Long: `Replay sends each line of a recording (JSON Lines, as "record:" writes them
or written by hand) to the target, in file order unless --concurrency is
above 1, and prints a summary. With --config, deliveries of sources that
verify signatures are re-signed with a fresh timestamp, since recorded
signatures are too old for any receiver; a line that records a 401 keeps its
signature, so that a forgery stays one. With --expect, an answer whose
decision or status differs from what its line records is a mismatch.

Progress (sent/total, rate, mismatches and errors so far, ETA) goes to
stderr: one line redrawn in place on a terminal, a plain line every
--progress-every otherwise.

Exits 1 when a line mismatched or got no usable answer.`,
		Example: `  webhookd replay --file recording.jsonl --target http://127.0.0.1:8080
  webhookd replay --file recording.jsonl --target http://127.0.0.1:8080 \
    --config configs/webhookd.yaml --expect --report report.json
  webhookd replay --file recording.jsonl --target http://staging:8080 --source stripe --rate 50/s --concurrency 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if opts.Rate, err = parseRate(rate); err != nil {
				return err
			}
			if configPath != "" {
				if opts.Config, err = configs.Load(configPath); err != nil {
					return err
				}
			}
			opts.Target, opts.Source = target, source
			progress := newProgressLine(cmd.ErrOrStderr(), progressEvery)
			opts.Progress = progress.update
			runner, err := replay.NewRunner(opts)
			if err != nil {
				return err
			}
			lines, torn, err := recording.ReadFile(file)
			if err != nil {
				return err
			}
			if len(torn) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "skipped %d torn line(s) of %s, cut short by a failed write or a lost machine: %v\n", len(torn), file, torn)
			}
			if len(lines) == 0 {
				return fmt.Errorf("%s holds no deliveries", file)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			report, runErr := runner.Run(ctx, lines)
			progress.finish()
			if source != "" && len(report.Results) == 0 && runErr == nil {
				return fmt.Errorf("no line of %s is of source %q", file, source)
			}
			if err := report.WriteText(cmd.OutOrStdout()); err != nil {
				return fmt.Errorf("print summary: %w", err)
			}
			if reportPath != "" {
				if err := report.WriteFile(reportPath); err != nil {
					return err
				}
			}
			if runErr != nil {
				return fmt.Errorf("replay interrupted: %w", runErr)
			}
			return report.Err()
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "file", "", "recording to replay (JSON Lines)")
	f.StringVar(&target, "target", "", "base URL of the webhookd to replay against, e.g. http://127.0.0.1:8080")
	f.StringVar(&configPath, "config", "", "the target's configuration, to re-sign deliveries of sources that verify signatures")
	f.IntVar(&opts.Concurrency, "concurrency", 1, "deliveries in flight; 1 keeps file order")
	f.StringVar(&rate, "rate", "", "at most this many deliveries per second, e.g. 50 or 50/s (default: no limit)")
	f.BoolVar(&opts.Expect, "expect", false, "compare each answer's decision and status with the line's; a difference fails the replay")
	f.StringVar(&source, "source", "", "replay only the lines of this source")
	f.StringVar(&reportPath, "report", "", "also write the per-line results and the summary to this file as JSON")
	f.DurationVar(&opts.Timeout, "timeout", 30*time.Second, "timeout of each request")
	f.DurationVar(&progressEvery, "progress-every", 10*time.Second, "when stderr is not a terminal, print a progress line this often (0: never); a terminal shows one line, redrawn")
	cmd.MarkFlagRequired("file")
	cmd.MarkFlagRequired("target")
	return cmd
}

// parseRate reads "50", "50/s" or "" (no limit).
func parseRate(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	r, err := strconv.ParseFloat(strings.TrimSuffix(s, "/s"), 64)
	if err != nil || !(r > 0) {
		return 0, fmt.Errorf("rate: %q is not a positive number of deliveries per second, e.g. 50 or 50/s", s)
	}
	return r, nil
}

// progressLine shows a replay's progress on w. On a terminal it is one
// line redrawn in place, at most every redraw. Elsewhere (a CI log, a
// pipe) it is a plain line every interval, or none when interval is 0: a
// long replay shows it is alive, without a line per delivery, and one
// shorter than interval adds nothing to the summary.
type progressLine struct {
	w        io.Writer
	terminal bool
	interval time.Duration
	last     time.Duration // Elapsed at the last line
	drawn    bool
}

// redraw bounds terminal writes: one per delivery would slow a fast replay.
const redraw = 100 * time.Millisecond

func newProgressLine(w io.Writer, interval time.Duration) *progressLine {
	return &progressLine{w: w, terminal: isTerminal(w), interval: interval}
}

func (l *progressLine) update(p replay.Progress) {
	switch {
	case l.terminal:
		if l.drawn && p.Sent < p.Total && p.Elapsed-l.last < redraw {
			return
		}
		fmt.Fprintf(l.w, "\r%s\x1b[K", p) // erase what a longer line left
	case l.interval <= 0 || p.Elapsed-l.last < l.interval:
		return
	default:
		fmt.Fprintln(l.w, p)
	}
	l.last, l.drawn = p.Elapsed, true
}

// finish ends the line drawn in place, so that what follows starts on its own.
func (l *progressLine) finish() {
	if l.terminal && l.drawn {
		fmt.Fprintln(l.w)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
