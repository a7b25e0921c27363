package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/gofiber/fiber/v2/utils"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/internal/ratelog"
	"github.com/webhookd/webhookd/recording"
)

// Decider makes, records and answers the decision for one delivery.
type Decider interface {
	Decide(ctx context.Context, d webhookd.Delivery) (webhookd.Outcome, error)
	Ready() error
}

// Recorder keeps a copy of each incoming request and its answer, for replay
// testing. It must not block.
type Recorder interface {
	Record(recording.Record)
}

// Metrics counts what the public listener does. Labels must stay bounded:
// the gateway passes "unknown" for sources it does not know.
type Metrics interface {
	Decided(source string, d webhookd.Decision)
	Rejected(source, reason string)
	Answered(source string, took time.Duration)
	// FilterFailed counts one delivery on which route's filter failed.
	FilterFailed(source, route string)
}

// nopMetrics is the Metrics of a gateway nobody watches.
type nopMetrics struct{}

func (nopMetrics) Decided(string, webhookd.Decision) {}
func (nopMetrics) Rejected(string, string)           {}
func (nopMetrics) Answered(string, time.Duration)    {}
func (nopMetrics) FilterFailed(string, string)       {}

// Observer is told of each request the public listener answers, as it is
// answered: the console's live tail and recent history. It runs on the
// intake path, so it must not block, and it must not keep d.Body or
// d.Headers, which point into the request.
type Observer interface {
	// Decided is told of a decided delivery.
	Decided(d webhookd.Delivery, out webhookd.Outcome)
	// Rejected is told of a request refused before a decision, why
	// (the rejections metric's reason) and what its sender read. source is
	// bounded as the Metrics' label is; d holds what was parsed before the
	// refusal, often nothing.
	Rejected(source string, d webhookd.Delivery, reason, message string)
}

// nopObserver is the Observer of a gateway without a console.
type nopObserver struct{}

func (nopObserver) Decided(webhookd.Delivery, webhookd.Outcome)        {}
func (nopObserver) Rejected(string, webhookd.Delivery, string, string) {}

// noConsole is the Console of a gateway built without one.
func noConsole(*fiber.Ctx) error {
	return webhookd.Errorf(webhookd.ENOTFOUND, "the console is not served by this gateway")
}

// Server runs the public and the admin listener.
type Server struct {
	// Metrics counts deliveries; MetricsHandler serves GET /metrics on the
	// admin listener, without the token so that a scraper can read it. Set
	// both before Open.
	Metrics        Metrics
	MetricsHandler http.Handler

	// Observer is told of every answered delivery; Console serves /ui/ on
	// the admin listener and checks credentials itself (a session cookie,
	// or the token). Set both before Open.
	Observer Observer
	Console  fiber.Handler

	// Recorders maps a source name to where its requests are recorded; the
	// key "" records requests for unknown sources. A source without an
	// entry records nothing. Set before Open.
	Recorders map[string]Recorder

	// Tracer makes a span of each delivery (see handleHook); nil, tracing
	// off, makes none. Set before Open.
	Tracer trace.Tracer

	logger  *zap.Logger
	decider Decider
	store   Store
	now     func() time.Time
	token   string
	sources map[string]*source
	// sourceNames says which sources are configured, for the admin API's
	// refusal of an unknown one.
	sourceNames string

	maxBody             int
	public, admin       *fiber.App
	publicLn, adminLn   net.Listener
	publicAddr, adminAd string
	publicTLS, adminTLS *configs.TLS
	stopping            atomic.Bool

	// readiness logs when /readyz turns 503 and back: a probe every few
	// seconds would otherwise log every answer. unavailable logs requests
	// refused with 503 at most once every 10 s.
	readiness, unavailable *ratelog.Failures
	// filterLog logs failed filter evaluations, which go on for as long
	// as deliveries lack what a filter reads.
	filterLog *ratelog.Failures
}

// NewServer builds both apps from cfg, the admin API on store. It fails on
// a source it cannot compile; a validated configuration always compiles.
func NewServer(cfg *configs.Config, decider Decider, store Store, logger *zap.Logger) (*Server, error) {
	s := &Server{
		Metrics:        nopMetrics{},
		MetricsHandler: http.NotFoundHandler(),
		Observer:       nopObserver{},
		Console:        noConsole,
		logger:         logger,
		readiness:      ratelog.New(logger, zapcore.WarnLevel, ratelog.DefaultEvery),
		unavailable:    ratelog.New(logger, zapcore.ErrorLevel, ratelog.DefaultEvery),
		filterLog:      ratelog.New(logger, zapcore.WarnLevel, ratelog.DefaultEvery),
		decider:        decider,
		store:          store,
		now:            time.Now,
		token:          cfg.Admin.Token,
		sources:        make(map[string]*source, len(cfg.Sources)),
		publicAddr:     cfg.Listen,
		adminAd:        cfg.Admin.Listen,
		publicTLS:      cfg.TLS,
		adminTLS:       cfg.Admin.TLS,
	}
	for i := range cfg.Sources {
		src, err := compileSource(&cfg.Sources[i])
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", cfg.Sources[i].Name, err)
		}
		s.sources[src.Name] = src
	}
	s.sourceNames = namesOf(s.sources)
	// Strict: "/hooks/billing/" is not source billing, it is no path at all.
	// The server reads a body before any route runs: it is ready for the
	// largest any source takes, and each source's own is checked by the
	// limit of the header (guardBodies) and by handleHook.
	s.maxBody = cfg.LargestBody()
	s.public = s.newApp(fiber.Config{BodyLimit: s.maxBody, StrictRouting: true, ErrorHandler: s.handlePublicError})
	s.guardBodies(s.public.Server())
	s.public.Get("/healthz", s.handleHealthz)
	s.public.Get("/readyz", s.handleReadyz)
	s.public.All("/hooks/:source", s.handleHook)

	s.admin = s.newApp(fiber.Config{BodyLimit: 64 << 10, ErrorHandler: s.handleError})
	// Registered before the token check: a route that answers ends the chain.
	s.admin.Get("/metrics", func(c *fiber.Ctx) error { return adaptor.HTTPHandler(s.MetricsHandler)(c) })
	s.admin.Get("/", func(c *fiber.Ctx) error { return c.Redirect("/ui/", fiber.StatusFound) })
	s.admin.All("/ui/*", func(c *fiber.Ctx) error { return s.Console(c) })
	s.admin.Use(s.requireToken)
	s.admin.Get("/admin/receipts", s.handleListReceipts)
	s.admin.Get("/admin/receipts/:source/:request_id", s.handleGetReceipt)
	s.admin.Get("/admin/resources/:source/:resource", s.handleGetResource)
	s.admin.Post("/admin/receipts/:source/:request_id/redeliver", s.handleRedeliver)
	s.admin.Get("/admin/outbox", s.handleListOutbox)
	s.admin.Get("/admin/deadletters", s.handleListDeadLetters)
	s.admin.Post("/admin/deadletters/retry", s.handleRetryDeadLetters)
	s.admin.Post("/admin/deadletters/discard", s.handleDiscardDeadLetters)
	s.admin.Post("/admin/deadletters/:source/:route/:request_id/retry", s.handleRetryDeadLetter)
	s.admin.Delete("/admin/deadletters/:source/:route/:request_id", s.handleDiscardDeadLetter)
	s.admin.Get("/admin/routes", s.handleListRoutes)
	s.admin.Post("/admin/routes/:source/:route/pause", s.handlePause(true))
	s.admin.Post("/admin/routes/:source/:route/resume", s.handlePause(false))
	// Go's profiler, behind the token: how a slowdown is investigated, in a
	// benchmark or in production (docs/performance.md).
	s.admin.Get("/debug/pprof/profile", adaptor.HTTPHandlerFunc(pprof.Profile))
	s.admin.Get("/debug/pprof/trace", adaptor.HTTPHandlerFunc(pprof.Trace))
	s.admin.Get("/debug/pprof/*", adaptor.HTTPHandlerFunc(pprof.Index))
	return s, nil
}

// newApp builds an app with cfg's body limit, routing and error handler,
// and what both apps share.
func (s *Server) newApp(cfg fiber.Config) *fiber.App {
	cfg.AppName = "webhookd"
	cfg.DisableStartupMessage = true
	cfg.ReadTimeout = 30 * time.Second
	cfg.WriteTimeout = 30 * time.Second
	cfg.IdleTimeout = 2 * time.Minute
	cfg.JSONEncoder = jsonLine
	app := fiber.New(cfg)
	app.Use(recover.New(recover.Config{
		EnableStackTrace: true,
		StackTraceHandler: func(c *fiber.Ctx, e any) {
			s.logger.Error("panic in handler", zap.String("path", c.Path()), zap.Any("panic", e), zap.Stack("stack"))
		},
	}))
	return app
}

// jsonLine encodes v as encoding/json does, and ends it with a newline as
// its Encoder does: every JSON answer is one line, so that a terminal's
// prompt does not follow it on the same line and line-oriented tools read
// it whole.
func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// refusedByServer marks a request the HTTP server refused before any route
// ran: its body was over max_body, or its header too large or malformed.
type refusedByServer struct{}

// guardBodies makes srv refuse a body over its source's max_body before
// reading it, where it can, and answer every request it refuses so that
// the client reads the answer:
//   - a Content-Length over the max_body of the source the path names is
//     refused as soon as the header is read, with 413 and no "100
//     Continue" first: without its Expect header, fasthttp checks the
//     length before it waits for the body;
//   - a chunked body is read up to the largest max_body of any source:
//     fasthttp forgets the path of a request whose chunked body overruns,
//     and the answer could not name its source. handleHook checks the
//     source's own limit once the body is read;
//   - a refused connection is drained before it closes (drainConn), when
//     it came from a drainListener.
func (s *Server) guardBodies(srv *fasthttp.Server) {
	srv.HeaderReceived = func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		length := h.ContentLength()
		if length < 0 {
			return fasthttp.RequestConfig{}
		}
		_, limit := s.bodyLimit(h.RequestURI())
		if length > limit {
			h.Del(fiber.HeaderExpect)
		}
		return fasthttp.RequestConfig{MaxRequestBodySize: limit}
	}
	answer := srv.ErrorHandler // Fiber's: it calls the app's error handler
	srv.ErrorHandler = func(ctx *fasthttp.RequestCtx, err error) {
		if c, ok := ctx.Conn().(*drainConn); ok {
			_, limit := s.bodyLimit(ctx.Request.Header.RequestURI())
			c.drainOnClose(drainBytes(limit))
		}
		ctx.SetUserValue(refusedByServer{}, true)
		answer(ctx, err)
	}
}

// bodyLimit returns the source a request URI names and its max_body, or
// "" and the largest max_body of any source when it names none.
func (s *Server) bodyLimit(uri []byte) (source string, limit int) {
	path, _, _ := bytes.Cut(uri, []byte("?"))
	if name, ok := bytes.CutPrefix(path, []byte("/hooks/")); ok {
		if src, known := s.sources[string(name)]; known {
			return src.Name, src.MaxBody
		}
	}
	return "", s.maxBody
}

// tooLarge refuses a body over limit, the max_body of source, or, when
// source is "", the largest of any source. length is the body's length,
// or -1 when it is not known (a chunked body that overran).
func tooLarge(source string, limit, length int) error {
	size := fmt.Sprintf("body is over %d bytes", limit)
	if length >= 0 {
		size = fmt.Sprintf("body is %d bytes", length)
	}
	if source == "" {
		return &webhookd.Error{Code: webhookd.ETOOLARGE, Field: "body", Message: fmt.Sprintf("%s; no source takes more than %d", size, limit)}
	}
	return &webhookd.Error{Code: webhookd.ETOOLARGE, Field: "body", Message: fmt.Sprintf("%s; source %s takes at most %d", size, source, limit)}
}

// Public and Admin expose the apps, for tests through app.Test.
func (s *Server) Public() *fiber.App { return s.public }
func (s *Server) Admin() *fiber.App  { return s.admin }

// Listeners are the public and the admin listener. webhookd binds them
// before it opens its store, so that an address in use stops it before it
// creates or locks anything.
type Listeners struct {
	Public, Admin net.Listener
}

// Listen binds cfg's listen and admin.listen, each over TLS when its tls
// is set. Its error names the field and the address, and says when
// another process holds the address; or names the TLS file that cannot
// serve. logger logs the certificates' reloads.
func Listen(cfg *configs.Config, logger *zap.Logger) (*Listeners, error) {
	return bind(publicEndpoint(cfg.Listen, cfg.TLS), adminEndpoint(cfg.Admin.Listen, cfg.Admin.TLS), logger)
}

func bind(public, admin endpoint, logger *zap.Logger) (*Listeners, error) {
	publicLn, err := listen(public, logger)
	if err != nil {
		return nil, err
	}
	adminLn, err := listen(admin, logger)
	if err != nil {
		publicLn.Close()
		return nil, err
	}
	return &Listeners{Public: publicLn, Admin: adminLn}, nil
}

func listen(e endpoint, logger *zap.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", e.addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%s: %s is already in use by another process (another webhookd?): stop it, or set %s to a free address", e.field, e.addr, e.field)
	case err != nil:
		return nil, fmt.Errorf("%s: cannot listen on %s: %w", e.field, e.addr, err)
	}
	if e.tls == nil {
		return ln, nil
	}
	tlsLn, err := serveTLS(ln, e.tls, e.tlsField, logger)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return tlsLn, nil
}

// Close closes both listeners, for a start that fails after Listen.
func (l *Listeners) Close() error {
	return errors.Join(l.Public.Close(), l.Admin.Close())
}

// Open binds both listeners, so that a bad address fails here, then serves
// them in the background.
func (s *Server) Open() error {
	ls, err := bind(publicEndpoint(s.publicAddr, s.publicTLS), adminEndpoint(s.adminAd, s.adminTLS), s.logger)
	if err != nil {
		return err
	}
	s.Serve(ls)
	return nil
}

// Serve serves ls, bound by Listen, in the background; Shutdown closes
// them.
func (s *Server) Serve(ls *Listeners) {
	s.publicLn, s.adminLn = ls.Public, ls.Admin
	go s.serve(s.public, drainListener{s.publicLn})
	go s.serve(s.admin, s.adminLn)
}

func (s *Server) serve(app *fiber.App, ln net.Listener) {
	if err := app.Listener(ln); err != nil {
		s.logger.Error("serve", zap.String("addr", ln.Addr().String()), zap.Error(err))
	}
}

// PublicAddr and AdminAddr return the bound addresses (useful with port 0).
func (s *Server) PublicAddr() string { return s.publicLn.Addr().String() }
func (s *Server) AdminAddr() string  { return s.adminLn.Addr().String() }

// Shutdown stops taking requests and waits, until ctx ends, for those in
// flight to finish.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopping.Store(true)
	return errors.Join(
		s.public.ShutdownWithContext(ctx),
		s.admin.ShutdownWithContext(ctx),
	)
}

func (s *Server) handleHealthz(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"status": "ok"})
}

func (s *Server) handleReadyz(c *fiber.Ctx) error {
	err := s.ready()
	if err != nil {
		s.readiness.Fail("not ready", zap.Error(err))
		return notReady{err}
	}
	s.readiness.OK("ready again")
	return c.JSON(fiber.Map{"status": "ready"})
}

func (s *Server) ready() error {
	if s.stopping.Load() {
		return webhookd.Errorf(webhookd.EUNAVAILABLE, "shutting down")
	}
	return s.decider.Ready()
}

// notReady is /readyz's refusal, which handleReadyz has logged.
type notReady struct{ error }

func (e notReady) Unwrap() error { return e.error }

// statuses is the one table from error codes to HTTP statuses.
var statuses = map[string]int{
	webhookd.EINVALID:      fiber.StatusBadRequest,
	webhookd.EUNAUTHORIZED: fiber.StatusUnauthorized,
	webhookd.ENOTFOUND:     fiber.StatusNotFound,
	webhookd.EMETHOD:       fiber.StatusMethodNotAllowed,
	webhookd.ECONFLICT:     fiber.StatusConflict,
	webhookd.ETOOLARGE:     fiber.StatusRequestEntityTooLarge,
	webhookd.EUNSUPPORTED:  fiber.StatusUnsupportedMediaType,
	webhookd.EUNAVAILABLE:  fiber.StatusServiceUnavailable,
	webhookd.EINTERNAL:     fiber.StatusInternalServerError,
}

// errorStatus returns the HTTP status and the caller-safe body of err.
// Fiber's own errors (no route, body too large, a request fasthttp could
// not parse) keep their status and say only its name: a parse error's
// text quotes the request's bytes, credentials included.
func errorStatus(err error) (int, fiber.Map) {
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code, fiber.Map{"error": strings.ToLower(utils.StatusMessage(fe.Code))}
	}
	body := fiber.Map{"error": webhookd.ErrorMessage(err)}
	if f := webhookd.ErrorField(err); f != "" {
		body["field"] = f
	}
	if r := webhookd.ErrorReason(err); r != "" {
		body["reason"] = r
	}
	return statuses[webhookd.ErrorCode(err)], body
}

// answerText is the message of an answer errorStatus built: what the
// caller of a refused request read, never a parse error's words, which
// quote the request.
func answerText(body fiber.Map) string {
	msg, _ := body["error"].(string)
	return msg
}

// reasonOf names why a request was refused, for the rejection metric.
// Fiber's errors are about the request as received: the HTTP server's
// refusals (a body or a header too large, a request it could not parse or
// finish reading) and the router's (no such path).
func reasonOf(err error) string {
	var fe *fiber.Error
	if errors.As(err, &fe) {
		switch fe.Code {
		case fiber.StatusRequestEntityTooLarge, fiber.StatusRequestHeaderFieldsTooLarge:
			return "too_large"
		case fiber.StatusNotFound:
			return "unknown_source"
		case fiber.StatusRequestTimeout:
			return "timeout"
		}
		return "invalid"
	}
	switch webhookd.ErrorCode(err) {
	case webhookd.EUNAUTHORIZED:
		return "signature"
	case webhookd.EINVALID, webhookd.EMETHOD:
		return "invalid"
	case webhookd.ETOOLARGE:
		return "too_large"
	case webhookd.EUNSUPPORTED:
		return "encoding"
	case webhookd.ENOTFOUND:
		return "unknown_source"
	case webhookd.EUNAVAILABLE:
		return "unavailable"
	}
	return "internal"
}

// sourceLabel keeps the source label bounded: names from request paths
// that no source has are counted together. It returns the configured name,
// never name itself, which points into a request buffer that fasthttp
// reuses while the metric keeps its labels.
func (s *Server) sourceLabel(name string) string {
	if src, ok := s.sources[name]; ok {
		return src.Name
	}
	return configs.UnknownSource
}

// handlePublicError counts, logs and marks the refusals that handleHook did
// not decide: the HTTP server's own, a panic, a path under /hooks/ that no
// route takes. The server's come before the request is whole, and may have
// lost its path (fasthttp resets a request whose chunked body overruns):
// those are counted under the unknown source.
func (s *Server) handlePublicError(c *fiber.Ctx, err error) error {
	source, hook := strings.CutPrefix(c.Path(), "/hooks/")
	var fe *fiber.Error
	if errors.As(err, &fe) && fe.Code == fiber.StatusRequestEntityTooLarge {
		// The server's refusal of a body over the limit of the header
		// (guardBodies): say which limit.
		name, limit := s.bodyLimit(c.Request().Header.RequestURI())
		length := c.Request().Header.ContentLength()
		if length <= limit {
			length = -1
		}
		err = tooLarge(name, limit, length)
	}
	if c.GetRespHeader("Webhook-Decision") == "" && (hook || c.Locals(refusedByServer{}) != nil) {
		status, body := errorStatus(err)
		reason := reasonOf(err)
		label := s.sourceLabel(source)
		s.Metrics.Rejected(label, reason)
		s.Observer.Rejected(label, webhookd.Delivery{}, reason, answerText(body))
		// The reason, not the error: a parse error's text quotes the
		// request's bytes, credentials included.
		s.logger.Info("delivery", zap.String("source", source), zap.String("decision", recording.Rejected), zap.Int("status", status), zap.String("reason", reason))
		c.Set("Webhook-Decision", recording.Rejected)
	}
	return s.handleError(c, err)
}

// handleError is the one place that writes error responses.
func (s *Server) handleError(c *fiber.Ctx, err error) error {
	status, body := errorStatus(err)
	switch {
	case errors.As(err, new(notReady)):
	case status == fiber.StatusServiceUnavailable:
		// An outage refuses every request until it ends; the store logs
		// its start and end.
		s.unavailable.Fail("request failed", zap.String("method", c.Method()), zap.String("path", c.Path()), zap.Int("status", status), zap.Error(err))
	case status >= 500:
		s.logger.Error("request failed", zap.String("method", c.Method()), zap.String("path", c.Path()), zap.Int("status", status), zap.Error(err))
	}
	if status == fiber.StatusServiceUnavailable {
		c.Set(fiber.HeaderRetryAfter, "1")
	}
	return c.Status(status).JSON(body)
}
