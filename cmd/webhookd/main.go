// Command webhookd is the webhook receiver gateway. main only wires: the
// work is in the packages, and Main is what the end-to-end tests start.
package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/console"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
	"github.com/webhookd/webhookd/gateway"
	"github.com/webhookd/webhookd/metrics"
	"github.com/webhookd/webhookd/postgres"
	"github.com/webhookd/webhookd/recording"
	"github.com/webhookd/webhookd/signature"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/store"
	"github.com/webhookd/webhookd/tracing"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "webhookd",
		Short: "Webhook receiver gateway: deduplicates on the business request ID, refuses stale versions, forwards at least once",
		Example: `  webhookd serve --config configs/webhookd.yaml
  webhookd config check --config configs/webhookd.yaml
  webhookd --version`,
		Version:      buildVersion(),
		SilenceUsage: true,
	}
	root.SetVersionTemplate("{{.Version}}")
	root.AddCommand(newServeCommand(), newConfigCommand(), newHealthCommand(), newReplayCommand(), newSinkCommand(), newVersionCommand())
	return root
}

func newServeCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Long: `Serve receives webhooks on listen, decides each (accepted, duplicate, stale,
conflict), forwards the accepted ones downstream and answers the admin API on
admin.listen, until SIGINT or SIGTERM. Without --config it reads
configs/webhookd.yaml, or the embedded example when that file is absent.`,
		Example: `  webhookd serve --config /etc/webhookd/webhookd.yaml
  WEBHOOKD_ADMIN_TOKEN=s3cret webhookd serve`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(path, cmd.Flags().Changed("config"))
			if err != nil {
				return err
			}
			logger, err := newLogger(cfg.Log)
			if err != nil {
				return err
			}
			defer logger.Sync()
			setMemoryLimit(logger)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			m := NewMain(cfg, logger)
			if err := m.Run(ctx); err != nil {
				m.Close(context.Background())
				return err
			}
			var failed error
			select {
			case <-ctx.Done():
			case <-m.Store.Failed():
				// Only a fresh start reads back what the disk holds: exit, for
				// the supervisor to start webhookd again.
				failed = m.Store.Ready()
			}
			// A second signal takes the default action and ends the process at
			// once, for an operator who will not wait for shutdown_timeout.
			stop()
			logger.Info("shutting down; a second signal stops at once", zap.Duration("timeout", cfg.ShutdownTimeout), zap.NamedError("store_failure", failed))
			closeCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			return errors.Join(failed, closeWithin(closeCtx, closeGrace, m.Close))
		},
	}
	cmd.Flags().StringVar(&path, "config", configs.DefaultPath, "configuration file (YAML)")
	return cmd
}

// closeGrace is how long shutdown may run past shutdown_timeout: the
// store still closes after the forwarder has given up its requests.
const closeGrace = 5 * time.Second

// closeWithin runs close, and gives up waiting a grace period after ctx
// ends: a hung disk must not keep the process from exiting for its
// supervisor to start it again. Exiting then is safe: every acknowledged
// delivery was synced before it was acknowledged, and the next start
// replays what the store had not yet flushed.
func closeWithin(ctx context.Context, grace time.Duration, close func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- close(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return err
	case <-time.After(grace):
		return fmt.Errorf("shutdown did not finish within shutdown_timeout and %s more: exiting without it", grace)
	}
}

// loadConfig reads path. When --config was not given and the default file is
// absent (the binary runs outside a checkout), the embedded example serves.
func loadConfig(path string, explicit bool) (*configs.Config, error) {
	var cfg *configs.Config
	var err error
	if _, statErr := os.Stat(path); !explicit && errors.Is(statErr, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "webhookd: %s not found, using the embedded example configuration\n", path)
		cfg, err = configs.Parse(configs.Example())
	} else {
		cfg, err = configs.Load(path)
	}
	if err != nil {
		return nil, err
	}
	if problems := storageProblems(cfg); len(problems) > 0 {
		return nil, &configs.ValidationError{Problems: problems}
	}
	return cfg, nil
}

// storageProblems checks cfg against the limits of its storage backend,
// which only the backend knows.
func storageProblems(cfg *configs.Config) []configs.Problem {
	var problems []configs.Problem
	limit := maxBody(cfg)
	if cfg.MaxBody > limit {
		problems = append(problems, configs.Problem{Path: "max_body",
			Msg: fmt.Sprintf("must be at most %d with storage.backend %s (got %d)", limit, cfg.Storage.Backend, cfg.MaxBody)})
	}
	for i, s := range cfg.Sources {
		// A source that took the global max_body has its problem named there.
		if s.MaxBody > limit && s.MaxBody != cfg.MaxBody {
			problems = append(problems, configs.Problem{Path: fmt.Sprintf("sources[%d].max_body", i),
				Msg: fmt.Sprintf("must be at most %d with storage.backend %s (got %d)", limit, cfg.Storage.Backend, s.MaxBody)})
		}
	}
	if cfg.Storage.Backend == configs.Postgres {
		if err := postgres.CheckDSN(cfg.Storage.DSN); err != nil {
			problems = append(problems, configs.Problem{Path: "storage.dsn", Msg: webhookd.ErrorMessage(err)})
		}
	}
	return problems
}

func newLogger(c configs.Log) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	zc := zap.NewProductionConfig()
	if c.Format == "console" {
		zc = zap.NewDevelopmentConfig()
	}
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	// Sampling would drop delivery lines under load; every delivery is logged once.
	zc.Sampling = nil
	return zc.Build()
}

// Main is one running gateway: store, intake and admin API.
type Main struct {
	Config *configs.Config
	Logger *zap.Logger

	Store     storage.Backend
	Forwarder *sender.Forwarder
	Server    *gateway.Server
	Console   *console.Console
	// Tracing exports the intake's and the forwarder's spans; it shuts
	// down last, once they made their last.
	Tracing   *tracing.Tracing
	recorders []*recording.FileRecorder

	closeOnce sync.Once
	closeErr  error
}

// NewMain returns a gateway for cfg; Run starts it.
func NewMain(cfg *configs.Config, logger *zap.Logger) *Main {
	return &Main{Config: cfg, Logger: logger}
}

// Run binds the listeners, opens the store and starts serving, then
// returns; serving goes on in the background until Close. The listeners
// come first: an address in use stops webhookd before it creates, locks or
// connects to anything.
func (m *Main) Run(ctx context.Context) error {
	ls, err := gateway.Listen(m.Config, m.Logger.Named("gateway"))
	if err != nil {
		return err
	}
	if err := m.start(ctx, ls); err != nil {
		ls.Close()
		return err
	}
	warnOpen(m.Config, m.Logger)
	return nil
}

// start opens the store and serves ls; until it serves them, the caller
// closes them.
func (m *Main) start(ctx context.Context, ls *gateway.Listeners) error {
	b, err := m.openBackend(ctx)
	if err != nil {
		return err
	}
	m.Store = b
	if m.Tracing, err = tracing.New(ctx, m.Config.Tracing, os.Getenv); err != nil {
		return err
	}
	rs := routes(m.Config)
	m.Forwarder = sender.New(m.Store, rs, m.Logger.Named("forward"))
	m.Forwarder.Tracer = m.Tracing.Tracer
	gauges := metrics.Gauges{
		Routes:        slices.Collect(maps.Keys(rs)),
		OutboxPending: func() (map[forward.Target]int, error) { return m.Store.Pending(context.Background()) },
		DeadLetters:   m.Store.DeadLetterCounts,
		RouteStates: func() (map[forward.Target]forward.RouteState, error) {
			return m.Store.RouteStates(context.Background())
		},
		Rates: make(map[forward.Target]forward.Rate),
	}
	for t, r := range rs {
		if r.Rate.Limit > 0 {
			gauges.Rates[t] = r.Rate
		}
	}
	m.Console = console.New(m.Config.Admin.Token, consoleSources(m.Config), m.Config.ReceiptTTL, m.Store, m.Logger.Named("console"))
	m.Console.Disk = diskOf(m.Store)
	// Badger's sizes and its data directory's free space; a PostgreSQL
	// database's disk is the database's to watch.
	if s, ok := m.Store.(*store.Store); ok {
		gauges.StoreSizes = s.Sizes
		gauges.Disk = func() metrics.Disk {
			d := s.Space()
			return metrics.Disk{Free: d.Free, Ballast: d.Ballast, Reserve: d.Reserve, Low: d.Low, Lows: d.Lows}
		}
	}
	met := metrics.New(gauges)
	m.Forwarder.Metrics = attempts{met, m.Console}
	if err := m.Forwarder.Open(); err != nil {
		return err
	}
	srv, err := gateway.NewServer(m.Config, m.Store, m.Store, m.Logger.Named("gateway"))
	if err != nil {
		return err
	}
	srv.Metrics, srv.MetricsHandler = met, met.Handler()
	srv.Observer, srv.Console = m.Console, m.Console.Handle
	srv.Recorders = m.openRecorders()
	srv.Tracer = m.Tracing.Tracer
	srv.Serve(ls)
	m.Server = srv
	m.Logger.Info("webhookd started",
		zap.String("listen", srv.PublicAddr()),
		zap.String("admin", srv.AdminAddr()),
		zap.String("storage", m.Config.Storage.Backend),
		zap.String("data_dir", m.Config.DataDir),
		zap.Int("sources", len(m.Config.Sources)),
		zap.Bool("tracing", m.Tracing.Enabled()),
	)
	return nil
}

// warnOpen logs, once at start, what the configuration leaves refused or
// open: an admin API without a token refuses every call, and a source
// that verifies no signature takes deliveries from anyone who can reach it.
func warnOpen(cfg *configs.Config, logger *zap.Logger) {
	if cfg.Admin.Token == "" {
		logger.Warn("no admin token: the admin API and the console refuse every call; set admin.token (the example configuration reads it from WEBHOOKD_ADMIN_TOKEN)",
			zap.String("admin", cfg.Admin.Listen))
	}
	for _, s := range cfg.Sources {
		if s.Verify == nil || s.Verify.Scheme == signature.None {
			logger.Warn("source without signature verification: anyone who can reach its URL can deliver to it; set its verify to check the sender",
				zap.String("source", s.Name))
		}
	}
}

// openRecorders opens one recorder per recording file, however its path is
// spelt, and maps each source to its own or the global one; "" (unknown
// sources) gets the global one. A file's recorder redacts every header that
// any of the configurations writing to it names: redacting more than one
// source asked for is safe, less would leak. A file that cannot be opened
// is logged, not fatal: recording never stops deliveries, and the recorder
// keeps trying to open it.
func (m *Main) openRecorders() map[string]gateway.Recorder {
	records := []*configs.Record{m.Config.Record}
	for _, s := range m.Config.Sources {
		records = append(records, s.Record)
	}
	redact := make(map[string][]string)
	for _, r := range records {
		if r != nil {
			file := fileOf(r)
			redact[file] = append(redact[file], r.Redact...)
		}
	}
	byFile := make(map[string]*recording.FileRecorder)
	open := func(r *configs.Record) gateway.Recorder {
		file := fileOf(r)
		if rec, ok := byFile[file]; ok {
			return rec
		}
		rec, err := recording.NewFileRecorder(r.Path, redact[file], m.Logger.Named("record"))
		if err != nil {
			m.Logger.Error("open recording; deliveries go on unrecorded until it opens", zap.String("path", r.Path), zap.Error(err))
		}
		byFile[file] = rec
		m.recorders = append(m.recorders, rec)
		return rec
	}
	recorders := make(map[string]gateway.Recorder)
	if m.Config.Record != nil {
		recorders[""] = open(m.Config.Record)
	}
	for _, s := range m.Config.Sources {
		switch {
		case s.Record != nil:
			recorders[s.Name] = open(s.Record)
		case m.Config.Record != nil:
			recorders[s.Name] = recorders[""]
		}
	}
	return recorders
}

// fileOf names the file r records to, the same however its path is spelt:
// symbolic links are followed as far as the path exists yet.
func fileOf(r *configs.Record) string {
	abs, err := filepath.Abs(r.Path)
	if err != nil {
		return filepath.Clean(r.Path)
	}
	for dir, rest := abs, ""; ; {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return abs
		}
		dir, rest = parent, filepath.Join(filepath.Base(dir), rest)
	}
}

// routes turns each route of each source into the forwarder's route.
func routes(cfg *configs.Config) map[forward.Target]sender.Route {
	rs := make(map[forward.Target]sender.Route)
	for _, s := range cfg.Sources {
		for _, f := range s.Routes {
			r := sender.Route{
				URL:         f.URL,
				Timeout:     f.Timeout,
				Concurrency: f.Concurrency,
				Policy:      forward.RetryPolicy{MaxAttempts: f.MaxAttempts, Initial: f.Backoff.Initial, Max: f.Backoff.Max},
				Supersede:   f.Supersede,
				Headers:     f.Headers,
				PassHeaders: f.PassHeaders,
				Rate:        f.ForwardRate(),
				Breaker:     f.ForwardBreaker(),
			}
			if f.Sign != nil {
				r.SignSecret = f.Sign.Secret
			}
			if t := f.TLS; t != nil {
				r.TLS = &sender.RouteTLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName}
			}
			rs[forward.Target{Source: s.Name, Route: f.Name}] = r
		}
	}
	return rs
}

// Close stops intake first, so nothing new arrives, then the forwarder,
// then closes the store, and last flushes the spans still buffered. It returns every error, joined; later calls do
// nothing.
func (m *Main) Close(ctx context.Context) error {
	m.closeOnce.Do(func() { m.closeErr = m.close(ctx) })
	return m.closeErr
}

func (m *Main) close(ctx context.Context) error {
	var errs []error
	if m.Console != nil {
		// Its live tails would hold the admin listener's shutdown open.
		m.Console.Close()
	}
	if m.Server != nil {
		errs = append(errs, m.Server.Shutdown(ctx))
	}
	for _, r := range m.recorders {
		errs = append(errs, r.Close())
	}
	if m.Forwarder != nil {
		errs = append(errs, m.Forwarder.Close(ctx))
	}
	if m.Store != nil {
		errs = append(errs, m.Store.Close())
	}
	if m.Tracing != nil {
		errs = append(errs, m.Tracing.Shutdown(ctx))
	}
	return errors.Join(errs...)
}
