package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/filter"
	"github.com/webhookd/webhookd/internal/jsonenc"
	"github.com/webhookd/webhookd/recording"
	"github.com/webhookd/webhookd/signature"
	"github.com/webhookd/webhookd/tracing"
	"github.com/webhookd/webhookd/versioning"
)

// maxIDLen bounds request IDs, delivery IDs, resources and versions: they
// are keys, or stored beside them in every record, and a provider's are far
// shorter.
const maxIDLen = 256

// selector finds one value in a delivery: the first of its places that
// holds one. A place is a header or a JSON field of the body. The zero
// selector is "not configured".
type selector struct {
	name   string // as configured, for error messages
	places []place
}

// place is a header, or a JSON field by its id in the source's fields.
type place struct {
	header string
	field  int
}

func parseSelector(name, spec string, fs *fields) (selector, error) {
	if spec == "" {
		return selector{}, nil
	}
	sel := selector{name: name}
	for alt := range strings.SplitSeq(spec, "|") {
		kind, arg, _ := strings.Cut(alt, ":")
		switch {
		case kind == "header" && arg != "":
			sel.places = append(sel.places, place{header: arg})
		case kind == "json" && arg != "":
			sel.places = append(sel.places, place{field: fs.add(name, arg)})
		default:
			return selector{}, fmt.Errorf("%s: bad selector %q", name, spec)
		}
	}
	return sel, nil
}

func (sel selector) configured() bool { return len(sel.places) > 0 }

// value returns the first place's value that is present and not empty, or
// "" when none is. JSON numbers come back as written; objects, arrays,
// booleans and null are refused where they are met. values are the
// source's fields in the body.
func (sel selector) value(c *fiber.Ctx, values []gjson.Result) (string, error) {
	for _, p := range sel.places {
		v, err := sel.at(p, c, values)
		if v != "" || err != nil {
			return v, err
		}
	}
	return "", nil
}

func (sel selector) at(p place, c *fiber.Ctx, values []gjson.Result) (string, error) {
	if p.header != "" {
		return strings.Clone(c.Get(p.header)), nil
	}
	r := values[p.field]
	switch r.Type {
	case gjson.Null:
		if r.Exists() {
			return "", webhookd.FieldErrorf(sel.name, "%s is null", sel.name)
		}
		return "", nil
	case gjson.String:
		return strings.Clone(r.Str), nil
	case gjson.Number:
		return strings.Clone(r.Raw), nil
	}
	return "", webhookd.FieldErrorf(sel.name, "%s must be a string or a number", sel.name)
}

// source is a configured source, compiled for the request path.
type source struct {
	*configs.Source
	requestID, deliveryID, resource, version selector
	fields                                   fields
	exclude                                  []string // sjson paths
	needsJSON                                bool
	verifier                                 signature.Verifier
	slack                                    bool // answers Slack's url_verification and app_rate_limited
	routes                                   []route
	// everyRoute names every route, in configuration order, when none
	// has a filter: every delivery then goes to all of them, and intake
	// hands this slice to each, read only, rather than build one.
	// everyPass is then their pass_headers, each name once.
	everyRoute, everyPass []string
}

// route is a configured route, compiled for the request path.
type route struct {
	name  string
	match *filter.Filter // nil selects every delivery
	// pass is the route's pass_headers as http.CanonicalHeaderKey spells
	// them: the keys of a delivery's Headers, which the forwarder reads
	// back the same way.
	pass []string
}

func compileSource(cfg *configs.Source) (*source, error) {
	src := &source{Source: cfg}
	var sig signature.Config // scheme none: a verifier that accepts everything
	if cfg.Verify != nil {
		sig = cfg.Verify.Signature()
	}
	v, err := signature.New(sig)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	src.verifier = v
	src.slack = sig.Scheme == signature.Slack
	var errs []error
	for _, f := range []struct {
		sel  *selector
		name string
		spec string
	}{
		{&src.requestID, "request_id", cfg.RequestID},
		{&src.deliveryID, "delivery_id", cfg.DeliveryID},
		{&src.resource, "resource", cfg.Resource},
		{&src.version, "version", cfg.Version},
	} {
		var err error
		*f.sel, err = parseSelector(f.name, f.spec, &src.fields)
		errs = append(errs, err)
	}
	for _, p := range cfg.FingerprintExclude {
		src.fields.add(p, p)
		src.exclude = append(src.exclude, jsonPath(p))
	}
	src.needsJSON = len(src.fields.nodes) > 0
	filtered := false
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		rt := route{name: r.Name, match: r.Match}
		for _, name := range r.PassHeaders {
			rt.pass = append(rt.pass, http.CanonicalHeaderKey(name))
		}
		src.routes = append(src.routes, rt)
		filtered = filtered || r.Match != nil
	}
	if !filtered {
		for _, r := range src.routes {
			src.everyRoute = append(src.everyRoute, r.name)
			for _, name := range r.pass {
				if !slices.Contains(src.everyPass, name) {
					src.everyPass = append(src.everyPass, name)
				}
			}
		}
	}
	return src, errors.Join(errs...)
}

// handleHook takes one webhook delivery.
func (s *Server) handleHook(c *fiber.Ctx) error {
	start := time.Now()
	name := c.Params("source")
	src, known := s.sources[name]
	var d webhookd.Delivery
	var out webhookd.Outcome
	var err error
	ctx := c.UserContext()
	var span trace.Span // nil when tracing is off
	if s.Tracer != nil {
		ctx, span = s.Tracer.Start(tracing.Extract(ctx, headerCarrier{c}), "intake",
			trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
		defer span.End()
	}
	switch {
	case !known:
		err = webhookd.Errorf(webhookd.ENOTFOUND, "unknown source %q", name)
	case c.Method() != fiber.MethodPost:
		c.Set(fiber.HeaderAllow, fiber.MethodPost)
		err = webhookd.Errorf(webhookd.EMETHOD, "webhooks are delivered with POST")
	default:
		_, verify := s.child(ctx, "verify")
		err = s.authenticate(c, src)
		endChild(verify, err)
		if err != nil {
			break
		}
		if src.slack && s.answerSlack(c, src) {
			return nil
		}
		if d, err = s.parse(c, src); err == nil {
			if span != nil {
				d.Trace = tracing.Traceparent(span.SpanContext())
			}
			dctx, decide := s.child(ctx, "decide")
			out, err = s.decider.Decide(dctx, d)
			if decide != nil && err == nil {
				decide.SetAttributes(attribute.String("webhookd.decision", string(out.Decision)))
			}
			endChild(decide, err)
		}
	}
	status, decision := 0, string(out.Decision)
	label := s.sourceLabel(name)
	if err != nil {
		var body fiber.Map
		status, body = errorStatus(err)
		decision = recording.Rejected
		reason := reasonOf(err)
		s.Metrics.Rejected(label, reason)
		s.Observer.Rejected(label, d, reason, answerText(body))
	} else {
		status = src.Status(out.Decision)
		s.Metrics.Decided(label, out.Decision)
		s.Observer.Decided(d, out)
	}
	took := time.Since(start)
	s.Metrics.Answered(label, took)
	// Check first: at a level that drops the line, the fields are never built
	// (they escaped to the heap, 640 bytes a request, even when dropped).
	if line := s.logger.Check(zap.InfoLevel, "delivery"); line != nil {
		line.Write(
			zap.String("source", name),
			zap.String("request_id", d.RequestID),
			zap.String("delivery_id", d.DeliveryID),
			zap.String("resource", d.Resource),
			zap.String("version", d.Version),
			zap.String("decision", decision),
			zap.Int("status", status),
			zap.Duration("latency", took),
			zap.NamedError("reason", err),
		)
	}
	s.record(c, name, known, start, status, decision)
	if span != nil {
		intakeAttributes(span, name, &d, decision, status)
	}
	// A refusal says so too: an answer without a body (to HEAD) has only this.
	c.Set("Webhook-Decision", decision)
	if err != nil {
		return err
	}
	c.Status(status)
	c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
	c.Response().SetBodyRaw(answer{
		Decision:      out.Decision,
		Source:        src.Name,
		RequestID:     d.RequestID,
		DeliveryID:    orNull(d.DeliveryID),
		Resource:      orNull(d.Resource),
		Version:       orNull(d.Version),
		LatestVersion: orNull(out.LatestVersion),
	}.appendJSON(make([]byte, 0, 256)))
	return nil
}

// child starts a span under ctx's, or returns a nil span when tracing is
// off.
func (s *Server) child(ctx context.Context, name string) (context.Context, trace.Span) {
	if s.Tracer == nil {
		return ctx, nil
	}
	return s.Tracer.Start(ctx, name)
}

// endChild ends a span child started, marking it failed when err is set.
func endChild(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, reasonOf(err))
	}
	span.End()
}

// intakeAttributes names on the intake span what was decided about a
// delivery: never its body or headers, which may hold secrets.
func intakeAttributes(span trace.Span, source string, d *webhookd.Delivery, decision string, status int) {
	span.SetAttributes(
		attribute.String("webhookd.source", source),
		attribute.String("webhookd.request_id", d.RequestID),
		attribute.String("webhookd.decision", decision),
		attribute.StringSlice("webhookd.routes", d.Routes),
		attribute.Int("http.response.status_code", status),
	)
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
}

// headerCarrier lets the W3C propagator read an incoming request's
// traceparent and tracestate. Values are copies: the span context keeps
// them past the request, whose buffers fasthttp reuses.
type headerCarrier struct{ c *fiber.Ctx }

func (h headerCarrier) Get(key string) string { return strings.Clone(h.c.Get(key)) }
func (h headerCarrier) Set(string, string)    {}
func (h headerCarrier) Keys() []string        { return nil }

// record hands a copy of the request and its answer to the source's
// recorder, or to the one for unknown sources (key "").
func (s *Server) record(c *fiber.Ctx, source string, known bool, at time.Time, status int, decision string) {
	key := ""
	if known {
		key = source
	}
	rec, ok := s.Recorders[key]
	if !ok {
		return
	}
	headers := make(map[string][]string)
	c.Request().Header.VisitAll(func(k, v []byte) {
		headers[string(k)] = append(headers[string(k)], string(v))
	})
	// The recorder writes later, on its own goroutine: nothing may point into
	// fasthttp's buffers, which the next request reuses.
	rec.Record(recording.Record{
		Time:     at,
		Source:   strings.Clone(source),
		Method:   strings.Clone(c.Method()),
		Path:     strings.Clone(c.Path()),
		Headers:  headers,
		Body:     string(c.Request().Body()), // as sent, and a copy; the writer base64-encodes it off the request path
		Status:   status,
		Decision: decision,
	})
}

// answer is the JSON body of every decided delivery.
type answer struct {
	Decision      webhookd.Decision `json:"decision"`
	Source        string            `json:"source"`
	RequestID     string            `json:"request_id"`
	DeliveryID    *string           `json:"delivery_id"`
	Resource      *string           `json:"resource"`
	Version       *string           `json:"version"`
	LatestVersion *string           `json:"latest_version"`
}

// appendJSON appends the answer as an encoding/json Encoder writes it,
// newline included (FuzzAnswer compares them), without its reflection:
// this runs at every delivery.
func (a answer) appendJSON(b []byte) []byte {
	b = append(b, `{"decision":`...)
	b = jsonenc.AppendString(b, string(a.Decision))
	b = append(b, `,"source":`...)
	b = jsonenc.AppendString(b, a.Source)
	b = append(b, `,"request_id":`...)
	b = jsonenc.AppendString(b, a.RequestID)
	b = appendNullable(append(b, `,"delivery_id":`...), a.DeliveryID)
	b = appendNullable(append(b, `,"resource":`...), a.Resource)
	b = appendNullable(append(b, `,"version":`...), a.Version)
	b = appendNullable(append(b, `,"latest_version":`...), a.LatestVersion)
	return append(b, "}\n"...)
}

func appendNullable(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return jsonenc.AppendString(b, *s)
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// authenticate checks the body's size against the source's max_body and
// the signature on the raw body. Nothing is written for a request that
// fails here.
func (s *Server) authenticate(c *fiber.Ctx, src *source) error {
	// The server read up to the largest max_body of any source: a chunked
	// body is checked against its own source's here.
	if n := len(c.Request().Body()); n > src.MaxBody {
		return tooLarge(src.Name, src.MaxBody, n)
	}
	// Bodies are taken as sent: Fiber's Body would inflate a compressed one
	// past max_body, before the signature check, and swap a broken one for
	// its error message.
	// Every Content-Encoding line counts, not only the first.
	for _, raw := range c.Request().Header.PeekAll(fiber.HeaderContentEncoding) {
		if enc := string(raw); !strings.EqualFold(strings.TrimSpace(enc), "identity") {
			return &webhookd.Error{Code: webhookd.EUNSUPPORTED, Field: fiber.HeaderContentEncoding,
				Message: fmt.Sprintf("Content-Encoding %q is not accepted: send the body uncompressed", enc)}
		}
	}
	if err := src.verifier.Verify(fiberHeaders{c}, c.Request().Body(), s.now()); err != nil {
		return unauthorized(err)
	}
	return nil
}

// answerSlack answers, on an authenticated request, the two messages of
// Slack's Events API that are not events: url_verification, which Slack
// sends when the Request URL is set and which wants its challenge back, and
// app_rate_limited, which says Slack is dropping this app's events. Neither
// has an event_id, the request ID, and neither is work for the downstream,
// so neither is decided, stored, recorded or forwarded; a 200 keeps Slack
// from counting them as failed deliveries. It reports whether it answered.
func (s *Server) answerSlack(c *fiber.Ctx, src *source) bool {
	body := c.Request().Body()
	if !gjson.ValidBytes(body) {
		return false
	}
	msg := gjson.ParseBytes(body) // a copy: nothing here points into fasthttp's buffers
	switch msg.Get("type").String() {
	case "url_verification":
		challenge := msg.Get("challenge")
		if challenge.Type != gjson.String || challenge.Str == "" {
			return false
		}
		s.logger.Info("slack url_verification answered", zap.String("source", src.Name))
		c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
		c.Response().SetBodyRaw(append(jsonenc.AppendString([]byte(`{"challenge":`), challenge.Str), '}'))
		return true
	case "app_rate_limited":
		s.logger.Warn("slack app_rate_limited: Slack is not sending this app's events for the workspace",
			zap.String("source", src.Name),
			zap.String("team_id", msg.Get("team_id").String()),
			zap.Int64("minute_rate_limited", msg.Get("minute_rate_limited").Int()),
			zap.String("api_app_id", msg.Get("api_app_id").String()))
		c.Response().Header.SetContentType(fiber.MIMEApplicationJSON)
		c.Response().SetBodyRaw([]byte(`{"acknowledged":"app_rate_limited"}`))
		return true
	}
	return false
}

// parse turns an authenticated request into a validated Delivery, or an
// error blaming the field at fault. Nothing is written for a request that
// fails here.
func (s *Server) parse(c *fiber.Ctx, src *source) (webhookd.Delivery, error) {
	body := c.Request().Body()
	var buf [maxStackFields]gjson.Result
	values := buf[:0]
	if src.needsJSON {
		if !gjson.ValidBytes(body) {
			return webhookd.Delivery{}, webhookd.FieldErrorf("body", "body is not valid JSON")
		}
		var dup *fieldNode
		if values, dup = src.fields.walk(body, values); dup != nil {
			return webhookd.Delivery{}, webhookd.FieldErrorf(dup.owner,
				"key %q appears more than once in the body; a key webhookd reads must appear once", dup.path)
		}
	}
	d := webhookd.Delivery{Source: src.Name, ReceivedAt: s.now()}
	var err error
	if d.RequestID, err = idValue(c, values, src.requestID, true); err != nil {
		return d, err
	}
	if d.DeliveryID, err = idValue(c, values, src.deliveryID, false); err != nil {
		return d, err
	}
	if d.Resource, err = idValue(c, values, src.resource, src.resource.configured()); err != nil {
		return d, err
	}
	if src.version.configured() {
		if d.Version, err = src.version.value(c, values); err != nil {
			return d, err
		}
		if d.Version == "" {
			return d, webhookd.FieldErrorf("version", "version is missing (%s)", src.Source.Version)
		}
		if problem := keyProblem(d.Version); problem != "" {
			return d, webhookd.FieldErrorf("version", "version %s", problem)
		}
		if d.VersionOrder, err = versioning.Parse(src.VersionFormat, d.Version); err != nil {
			return d, webhookd.FieldErrorf("version", "version %q is not a valid %s version", d.Version, src.VersionFormat)
		}
		d.AcceptTies = src.VersionTies == versioning.TiesAccept
	}
	if d.Fingerprint, err = dedupe.Fingerprint(body, src.exclude); err != nil {
		return d, webhookd.FieldErrorf("body", "cannot fingerprint body: %v", err)
	}
	if len(src.routes) > 0 {
		d.Forward = true
		d.Routes, d.Headers = s.selectRoutes(c, src, &d, body)
		d.Body = body // read only while Decide runs, inside this handler
		d.ContentType = strings.Clone(c.Get(fiber.HeaderContentType))
	}
	return d, nil
}

// selectRoutes returns the names of the routes whose filter selects d, in
// configuration order, and the request's headers that any of them passes
// through. Filters run on every delivery parsed, before the decision; only
// an accepted delivery's routes are written. parse has checked that the
// body is JSON when the source reads a field of it. The names are the
// configuration's strings and the headers copies: both outlive the
// request. A filter whose evaluation fails does not select d; the
// failure is counted and logged, as it usually means the filter reads a
// field that deliveries do not have without has().
func (s *Server) selectRoutes(c *fiber.Ctx, src *source, d *webhookd.Delivery, body []byte) (names []string, headers map[string]string) {
	if src.everyRoute != nil {
		return src.everyRoute, passHeaders(c, src.everyPass, nil)
	}
	in := filter.Input{Body: body, ValidJSON: src.needsJSON, Header: requestHeader(c), RequestID: d.RequestID, Resource: d.Resource, Version: d.Version}
	for _, r := range src.routes {
		match, err := r.match.Match(&in)
		if err != nil {
			s.Metrics.FilterFailed(src.Name, r.name)
			s.filterLog.Fail("a route's filter failed on a delivery, which the route therefore does not take",
				zap.String("source", src.Name), zap.String("route", r.name), zap.String("request_id", d.RequestID), zap.Error(err))
		}
		if match {
			names = append(names, r.name)
			headers = passHeaders(c, r.pass, headers)
		}
	}
	return names, headers
}

// requestHeader is a filter's view of c's request headers: name is lower
// case, as HTTP names are case-insensitive; a header sent on several lines
// reads as their values joined by ", " (RFC 9110, 5.3). The value is a
// copy, so a filter may keep it.
func requestHeader(c *fiber.Ctx) func(name string) (string, bool) {
	return func(name string) (string, bool) {
		values := c.Request().Header.PeekAll(name)
		switch len(values) {
		case 0:
			return "", false
		case 1:
			return string(values[0]), true
		}
		return string(bytes.Join(values, []byte(", "))), true
	}
}

// fiberHeaders lets package signature read Fiber's request headers.
type fiberHeaders struct{ c *fiber.Ctx }

func (h fiberHeaders) Get(name string) string { return h.c.Get(name) }

// unauthorized turns a verification failure into a 401 that says which
// check failed.
func unauthorized(err error) error {
	var se *signature.Error
	if !errors.As(err, &se) {
		return err
	}
	return &webhookd.Error{Code: webhookd.EUNAUTHORIZED, Message: se.Error(), Field: se.Header, Reason: string(se.Reason)}
}

// passHeaders adds to h, and returns, the headers names the request
// carries. A delivery holds one set of headers for the entries of all its
// routes, those any of them passes through; the forwarder sends each
// route only those its own pass_headers names.
func passHeaders(c *fiber.Ctx, names []string, h map[string]string) map[string]string {
	for _, name := range names {
		if _, ok := h[name]; ok {
			continue
		}
		if v := c.Get(name); v != "" {
			if h == nil {
				h = make(map[string]string, len(names))
			}
			h[name] = strings.Clone(v)
		}
	}
	return h
}

// idValue reads an identifier and checks it can serve as a key.
func idValue(c *fiber.Ctx, values []gjson.Result, sel selector, required bool) (string, error) {
	if !sel.configured() {
		return "", nil
	}
	v, err := sel.value(c, values)
	if err != nil {
		return "", err
	}
	if v == "" {
		if required {
			return "", webhookd.FieldErrorf(sel.name, "%s is missing or empty", sel.name)
		}
		return "", nil
	}
	if problem := keyProblem(v); problem != "" {
		return "", webhookd.FieldErrorf(sel.name, "%s %s", sel.name, problem)
	}
	return v, nil
}

// keyProblem says why v cannot serve as a key, or "" when it can. Checked
// by hand rather than through the validator, which took 1 µs per request,
// and measured in bytes, which is what a key costs. A key of only
// whitespace is refused as an empty one is: it names nothing.
func keyProblem(v string) string {
	switch {
	case strings.TrimSpace(v) == "":
		return "is only whitespace"
	case len(v) > maxIDLen:
		return fmt.Sprintf("is longer than %d bytes", maxIDLen)
	case !printable(v):
		return "must be UTF-8 text without control characters or U+FFFD"
	}
	return ""
}

// printable refuses U+FFFD too: JSON decoding turns every lone surrogate
// escape into it, so "\ud800" and "\udbff" would be one key.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			return false
		}
	}
	return true
}
