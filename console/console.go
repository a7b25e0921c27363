package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"mime"
	"path"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
)

// Records is what the console reads and repairs: the admin API's
// records, the store's readiness, the queues' depths by route, and the
// routes' states, which it pauses and resumes.
type Records interface {
	storage.Records
	Ready() error
	Pending(ctx context.Context) (map[forward.Target]int, error)
	DeadLetterCounts() (map[forward.Target]int, error)
	RouteStates(ctx context.Context) (map[forward.Target]forward.RouteState, error)
	Pause(ctx context.Context, target forward.Target, paused bool) error
}

// Usage is the disk a store takes, and the room it has left where that
// disk is its own.
type Usage struct {
	// Size is the bytes the store's data takes on disk; Of says what it
	// counts, in words.
	Size int64
	Of   string
	// Space is the free space of a store on a local disk; nil for a
	// database, whose server watches its own disk.
	Space *Space
}

// Space is the free space of a store's local disk, in bytes.
type Space struct {
	Free int64
	// Ballast is free space the store holds for its last writes once the
	// disk fills, and gives back then.
	Ballast int64
	// Reserve is the free space below which the store takes no new
	// decisions; Low says it is below it now.
	Reserve int64
	Low     bool
}

// Disk reports a store's Usage.
type Disk interface {
	Usage(ctx context.Context) (Usage, error)
}

// NoDisk is the Disk of a store that reports none.
type NoDisk struct{}

func (NoDisk) Usage(context.Context) (Usage, error) {
	return Usage{}, errors.New("not reported by this storage backend")
}

// Source is a configured source, as the console lists it.
type Source struct {
	Name string
	// Routes are the source's routes, in configuration order; none when
	// the source only records decisions.
	Routes []Route
}

// Route is a configured route of a source, with its rate limit as the
// configuration gives it: Rate "N/s" or "N/m", "" for none, and Burst, 0
// for the default.
type Route struct {
	Name  string
	Rate  string
	Burst int
}

// Forwards says whether the source has routes.
func (s Source) Forwards() bool { return len(s.Routes) > 0 }

// Route returns s's route of that name, nil when s has none.
func (s Source) Route(name string) *Route {
	for i := range s.Routes {
		if s.Routes[i].Name == name {
			return &s.Routes[i]
		}
	}
	return nil
}

//go:embed templates static
var files embed.FS

// Console serves the operator console under /ui/, and is told what the
// gateway answers and what the forwarder's attempts do, for the overview
// and the live tail.
type Console struct {
	// Disk reports the store's size and free space on the overview. Set
	// before serving.
	Disk Disk

	records Records
	sources []Source
	// receiptTTL is how long a receipt, and the payload a redelivery
	// sends, are kept.
	receiptTTL time.Duration
	auth       auth
	logger     *zap.Logger
	now        func() time.Time
	*activity

	pages   map[string]*template.Template
	assets  map[string]asset
	handler fasthttp.RequestHandler
	closing chan struct{}
}

// New returns the console of the admin token (none: every page refuses,
// like the admin API), for sources whose receipts are kept for receiptTTL,
// reading and repairing through records.
func New(token string, sources []Source, receiptTTL time.Duration, records Records, logger *zap.Logger) *Console {
	return newConsole(token, sources, receiptTTL, records, logger, time.Now)
}

func newConsole(token string, sources []Source, receiptTTL time.Duration, records Records, logger *zap.Logger, now func() time.Time) *Console {
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.Name
	}
	c := &Console{
		Disk:       NoDisk{},
		records:    records,
		sources:    sources,
		receiptTTL: receiptTTL,
		auth:       newAuth(token),
		logger:     logger,
		now:        now,
		activity:   newActivity(names, now),
		closing:    make(chan struct{}),
	}
	c.assets = loadAssets()
	c.pages = c.parsePages()
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ErrorHandler: c.handleError})
	app.Use(c.secureHeaders)
	app.Get("/ui/static/:name", c.handleAsset)
	app.Get("/ui/login", c.handleLoginPage)
	app.Post("/ui/login", c.handleLogin)
	ui := app.Group("/ui", c.authenticate)
	ui.Post("/*", c.checkPost)
	ui.Get("/", c.handleOverview)
	ui.Post("/logout", c.handleLogout)
	ui.Get("/tail", c.handleTail)
	ui.Get("/tail/events", c.handleEvents)
	ui.Get("/receipt", c.handleReceipt)
	ui.Post("/receipt/redeliver", c.handleRedeliver)
	ui.Get("/resource", c.handleResource)
	ui.Get("/deadletters", c.handleDeadLetters)
	ui.Post("/deadletters/retry", c.handleRetry)
	ui.Post("/deadletters/discard", c.handleDiscard)
	ui.Post("/deadletters/bulk", c.handleBulk)
	ui.Get("/outbox", c.handleOutbox)
	ui.Get("/receipts", c.handleReceipts)
	ui.Post("/routes/pause", c.handlePause)
	ui.Post("/routes/resume", c.handleResume)
	c.handler = app.Handler()
	return c
}

// Handle serves one request under /ui/; the gateway routes them here. The
// console's own app answers it on the same connection.
func (c *Console) Handle(fc *fiber.Ctx) error {
	c.handler(fc.Context())
	return nil
}

// Close ends the live tails' streams, which would otherwise hold the admin
// listener's shutdown until its deadline.
func (c *Console) Close() {
	select {
	case <-c.closing:
	default:
		close(c.closing)
	}
}

// contentSecurityPolicy allows the console's own files and nothing else:
// no inline script or style, no other site, no framing.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

func (c *Console) secureHeaders(fc *fiber.Ctx) error {
	fc.Set("Content-Security-Policy", contentSecurityPolicy)
	fc.Set("X-Content-Type-Options", "nosniff")
	fc.Set("X-Frame-Options", "DENY")
	fc.Set("Referrer-Policy", "same-origin")
	fc.Set(fiber.HeaderCacheControl, "no-store")
	return fc.Next()
}

// asset is one embedded static file, served under a name that changes with
// its content so that a browser may keep it for good.
type asset struct {
	body []byte
	mime string
	etag string
}

func loadAssets() map[string]asset {
	out := make(map[string]asset)
	entries, err := fs.ReadDir(files, "static")
	if err != nil {
		panic(err) // embedded at build time
	}
	for _, e := range entries {
		b, err := files.ReadFile("static/" + e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(b)
		out[e.Name()] = asset{body: b, mime: mime.TypeByExtension(path.Ext(e.Name())), etag: hex.EncodeToString(sum[:6])}
	}
	return out
}

// assetURL names an asset with its content's hash.
func (c *Console) assetURL(name string) string {
	return "/ui/static/" + name + "?v=" + c.assets[name].etag
}

func (c *Console) handleAsset(fc *fiber.Ctx) error {
	a, ok := c.assets[fc.Params("name")]
	if !ok {
		return webhookd.Errorf(webhookd.ENOTFOUND, "no such file")
	}
	fc.Set(fiber.HeaderContentType, a.mime)
	fc.Set(fiber.HeaderCacheControl, "public, max-age=31536000, immutable")
	return fc.Send(a.body)
}

// page is what every page's template gets.
type page struct {
	Title   string
	Nav     string // the menu entry to mark as current
	CSRF    string
	Sources []Source
	Now     time.Time
	Notice  *notice
	Data    any
}

// notice says what an action did, or why it was refused.
type notice struct {
	OK   bool
	Text string
}

func (c *Console) render(fc *fiber.Ctx, status int, name string, p page) error {
	t, ok := c.pages[name]
	if !ok {
		return webhookd.Errorf(webhookd.EINTERNAL, "no page %s", name)
	}
	p.Sources, p.Now, p.CSRF = c.sources, c.now(), c.csrfOf(fc)
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "layout", p); err != nil {
		return webhookd.Errorf(webhookd.EINTERNAL, "render %s: %v", name, err)
	}
	fc.Status(status)
	fc.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	return fc.Send(b.Bytes())
}

// csrfOf is the CSRF token the forms of fc's answer carry, "" before a
// login.
func (c *Console) csrfOf(fc *fiber.Ctx) string {
	if cred := credential(fc); cred != "" {
		return c.auth.csrf(cred)
	}
	return ""
}

// statusOf is the admin API's status for each error code the console's
// pages meet, so that a script reading a page gets the API's answer.
func statusOf(err error) int {
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	switch webhookd.ErrorCode(err) {
	case webhookd.EINVALID:
		return fiber.StatusBadRequest
	case webhookd.EUNAUTHORIZED:
		return fiber.StatusUnauthorized
	case webhookd.ENOTFOUND:
		return fiber.StatusNotFound
	case webhookd.ECONFLICT:
		return fiber.StatusConflict
	case webhookd.EUNAVAILABLE:
		return fiber.StatusServiceUnavailable
	}
	return fiber.StatusInternalServerError
}

// handleError is the one place the console answers an error: a page that
// says it in words.
func (c *Console) handleError(fc *fiber.Ctx, err error) error {
	status := statusOf(err)
	msg := webhookd.ErrorMessage(err)
	var fe *fiber.Error
	if errors.As(err, &fe) {
		msg = fe.Message
	}
	if status >= 500 {
		c.logger.Error("console request failed", zap.String("method", fc.Method()), zap.String("path", fc.Path()), zap.Int("status", status), zap.Error(err))
	}
	if strings.HasPrefix(fc.Path(), "/ui/tail/events") || strings.HasPrefix(fc.Path(), "/ui/static/") {
		fc.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
		return fc.Status(status).SendString(msg + "\n")
	}
	if rerr := c.render(fc, status, "error", page{Title: "Refused", Data: msg}); rerr != nil {
		fc.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
		return fc.Status(status).SendString(msg + "\n")
	}
	return nil
}
