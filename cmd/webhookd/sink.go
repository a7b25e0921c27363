package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/sink"
)

func newSinkCommand() *cobra.Command {
	var cfg sink.Config
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "Run a downstream stand-in that prints, counts and checks what webhookd forwards",
		Long: `Sink is a downstream to point a source's forward URL at, for demos and tests.
It prints one line per request, counts arrivals per Idempotency-Key, flags a
version of a resource that arrives after a newer one, checks signed
forwarding with --verify-secret, and fails or delays requests on demand.
GET /stats answers its counts as JSON.`,
		Example: `  webhookd sink --listen 127.0.0.1:9000
  webhookd sink --fail-first 2 --latency 50ms
  webhookd sink --verify-secret whsec_c2VjcmV0LXNpZ25pbmcta2V5 --record forwarded.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := newLogger(configs.Log{Level: "info", Format: "console"})
			if err != nil {
				return err
			}
			defer logger.Sync()
			s, err := sink.NewServer(cfg, cmd.OutOrStdout(), logger.Named("sink"))
			if err != nil {
				return err
			}
			// Signals are caught before the listener opens: a SIGTERM sent as
			// soon as the sink answers must shut it down, not kill it.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if err := s.Open(); err != nil {
				s.Close()
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "sink listening on %s (stats: GET %s/stats)\n", s.Addr(), s.URL())
			<-ctx.Done()
			closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return s.Shutdown(closeCtx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:9000", "address to listen on")
	f.StringVar(&cfg.Record, "record", "", "append every request to this file (JSON Lines, the replay format)")
	f.StringSliceVar(&cfg.Redact, "redact", nil, "headers written as REDACTED in the recording, besides Authorization (comma-separated)")
	f.IntVar(&cfg.FailFirst, "fail-first", 0, "answer 503 to the first N requests of each Idempotency-Key")
	f.Float64Var(&cfg.FailRate, "fail-rate", 0, "answer 503 to this share of requests, at random (0 to 1)")
	f.IntVar(&cfg.Status, "status", 0, "answer this status to every request not failed otherwise (default 200)")
	f.DurationVar(&cfg.Latency, "latency", 0, "delay every answer by this long")
	f.StringVar(&cfg.VerifySecret, "verify-secret", "", "Standard Webhooks secret (whsec_...) of signed forwarding; a bad signature is answered 401")
	return cmd
}
