package gateway

import (
	"context"
	"crypto/subtle"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
)

// Store is what the admin API reads and changes: the records it lists and
// repairs, and each route's state and backlog, which it shows and pauses.
// A storage.Backend is one.
type Store interface {
	storage.Records
	Pause(ctx context.Context, target forward.Target, paused bool) error
	RouteStates(ctx context.Context) (map[forward.Target]forward.RouteState, error)
	Pending(ctx context.Context) (map[forward.Target]int, error)
	DeadLetterCounts() (map[forward.Target]int, error)
}

// requireToken guards the admin API. With no token configured every call is
// refused: an admin API open by default would leak every receipt.
func (s *Server) requireToken(c *fiber.Ctx) error {
	if s.token == "" {
		return webhookd.Errorf(webhookd.EUNAUTHORIZED, "admin API disabled: %s", configs.NoAdminToken)
	}
	// The scheme's name is case-insensitive (RFC 9110, 11.1).
	scheme, got, _ := strings.Cut(c.Get(fiber.HeaderAuthorization), " ")
	if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
		return webhookd.Errorf(webhookd.EUNAUTHORIZED, "missing or wrong bearer token")
	}
	return c.Next()
}

// param returns a path parameter, percent-decoded: request IDs and resources
// may hold '/' and other reserved characters.
func param(c *fiber.Ctx, name string) (string, error) {
	v, err := url.PathUnescape(c.Params(name))
	if err != nil {
		return "", webhookd.FieldErrorf(name, "bad percent-encoding in %s", name)
	}
	return v, nil
}

// knownSource refuses a source the configuration does not name: the store
// would answer as if the source had no data, and a misspelt name would
// read as "nothing here". A source removed from the configuration is
// unknown too, though its receipts stay in the store until they expire.
func (s *Server) knownSource(name string) error {
	if _, ok := s.sources[name]; ok {
		return nil
	}
	return &webhookd.Error{Code: webhookd.ENOTFOUND, Field: "source", Message: fmt.Sprintf("unknown source %q: %s", name, s.sourceNames)}
}

// knownRoute refuses a route that source (a configured one) does not
// have, for the reason knownSource refuses a source: a route removed from
// the configuration is unknown too, though its entries and dead letters
// stay in the store.
func (s *Server) knownRoute(source, route string) error {
	var names []string
	for _, r := range s.sources[source].routes {
		if r.name == route {
			return nil
		}
		names = append(names, r.name)
	}
	has := "it has no routes"
	if len(names) > 0 {
		has = "its routes are " + strings.Join(names, ", ")
	}
	return &webhookd.Error{Code: webhookd.ENOTFOUND, Field: "route", Message: fmt.Sprintf("unknown route %q of source %s: %s", route, source, has)}
}

// namesOf says which sources are configured, for knownSource's message:
// all of them, sorted, when they fit on a line, or how many there are.
func namesOf(sources map[string]*source) string {
	const listed = 12
	if len(sources) > listed {
		return fmt.Sprintf("%d sources are configured", len(sources))
	}
	names := slices.Sorted(maps.Keys(sources))
	return "the configured sources are " + strings.Join(names, ", ")
}

// receiptView is a receipt as the admin API shows it: residual risk is
// derived from the decision and forward state, never stored.
type receiptView struct {
	*dedupe.Receipt
	ResidualRisk []string `json:"residual_risk"`
}

// requestParams returns the source and request ID a path names.
func (s *Server) requestParams(c *fiber.Ctx) (source, requestID string, err error) {
	if source, err = s.sourceParam(c); err == nil {
		requestID, err = param(c, "request_id")
	}
	return source, requestID, err
}

// deadLetterParams returns the target and request ID a dead letter's path
// names.
func (s *Server) deadLetterParams(c *fiber.Ctx) (target forward.Target, requestID string, err error) {
	if target, err = s.routeParams(c); err != nil {
		return target, "", err
	}
	requestID, err = param(c, "request_id")
	return target, requestID, err
}

// routeParams returns the configured route a path names.
func (s *Server) routeParams(c *fiber.Ctx) (target forward.Target, err error) {
	if target.Source, err = s.sourceParam(c); err != nil {
		return target, err
	}
	if target.Route, err = param(c, "route"); err != nil {
		return target, err
	}
	return target, s.knownRoute(target.Source, target.Route)
}

// sourceParam returns the configured source a path names.
func (s *Server) sourceParam(c *fiber.Ctx) (string, error) {
	source, err := param(c, "source")
	if err != nil {
		return "", err
	}
	return source, s.knownSource(source)
}

func (s *Server) handleGetReceipt(c *fiber.Ctx) error {
	source, requestID, err := s.requestParams(c)
	if err != nil {
		return err
	}
	r, err := s.store.Receipt(c.UserContext(), source, requestID)
	if err != nil {
		return err
	}
	return c.JSON(viewReceipt(r))
}

// viewReceipt is r as the admin API shows it, alone or in a list.
func viewReceipt(r *dedupe.Receipt) receiptView {
	return receiptView{Receipt: r, ResidualRisk: r.ResidualRisk()}
}

// handleListReceipts answers a page of the receipts the query selects,
// newest first.
func (s *Server) handleListReceipts(c *fiber.Ctx) error {
	q, err := s.receiptQuery(c)
	if err != nil {
		return err
	}
	receipts, next, err := s.store.Receipts(c.UserContext(), q)
	if err != nil {
		return cursorError(err)
	}
	items := make([]receiptView, len(receipts))
	for i := range receipts {
		items[i] = viewReceipt(&receipts[i])
	}
	return c.JSON(fiber.Map{"items": items, "next_cursor": next})
}

// receiptQuery reads and checks the query of a receipts search, so that a
// misspelt value is refused rather than read as "nothing matches".
func (s *Server) receiptQuery(c *fiber.Ctx) (q storage.ReceiptQuery, err error) {
	target, err := s.targetQuery(c)
	if err != nil {
		return q, err
	}
	q.Source, q.Route = target.Source, target.Route
	if q.Resource = query(c, "resource"); q.Resource != "" && q.Source == "" {
		// Resources are keyed within their source.
		return q, webhookd.FieldErrorf("resource", "resource= names a resource of the source that source= names: give both")
	}
	switch d := webhookd.Decision(query(c, "decision")); d {
	case "", webhookd.Accepted, webhookd.Stale:
		q.Decision = d
	default:
		return q, webhookd.FieldErrorf("decision", "a receipt's decision is accepted or stale, not %q: duplicates and conflicts are later deliveries of a receipt, listed in its deliveries", d)
	}
	switch st := webhookd.ForwardState(query(c, "forward_state")); st {
	case "", webhookd.ForwardPending, webhookd.ForwardRetrying, webhookd.ForwardDelivered,
		webhookd.ForwardDead, webhookd.ForwardDiscarded, webhookd.ForwardSuperseded:
		q.ForwardState = st
	default:
		return q, webhookd.FieldErrorf("forward_state", "unknown forward_state %q: it is pending, retrying, delivered, dead, discarded or superseded", st)
	}
	if q.Since, q.Until, err = timeRange(c); err != nil {
		return q, err
	}
	q.Page, err = pageQuery(c)
	return q, err
}

// query returns a query parameter, copied out of the request's buffer,
// which fasthttp reuses.
func query(c *fiber.Ctx, name string) string {
	return strings.Clone(c.Query(name))
}

// timeRange reads since= and until=, RFC 3339 times, either one left out
// for no bound.
func timeRange(c *fiber.Ctx) (since, until time.Time, err error) {
	if since, err = timeQuery(c, "since"); err != nil {
		return since, until, err
	}
	if until, err = timeQuery(c, "until"); err != nil {
		return since, until, err
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return since, until, webhookd.FieldErrorf("until", "until= must be later than since=: the range is since <= t < until")
	}
	return since, until, nil
}

func timeQuery(c *fiber.Ctx, name string) (time.Time, error) {
	v := c.Query(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		// A '+' in a query string reads as a space: the likeliest mistake.
		return time.Time{}, webhookd.FieldErrorf(name, "%s= must be an RFC 3339 time, such as 2026-12-02T03:00:00Z (write an offset's + as %%2B), not %q", name, v)
	}
	return t, nil
}

// pageQuery reads limit= and cursor=.
func pageQuery(c *fiber.Ctx) (storage.Page, error) {
	p := storage.Page{Cursor: query(c, "cursor")}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > storage.MaxLimit {
			return p, webhookd.FieldErrorf("limit", "limit= must be a whole number from 1 to %d, not %q", storage.MaxLimit, v)
		}
		p.Limit = n
	}
	return p, nil
}

// cursorError names the cursor as the field at fault when a backend
// refuses a page's query: every other part of the query is checked before
// it reaches the backend, and the cursor, opaque to the gateway, is not.
func cursorError(err error) error {
	if webhookd.ErrorCode(err) != webhookd.EINVALID || webhookd.ErrorField(err) != "" {
		return err
	}
	return &webhookd.Error{Code: webhookd.EINVALID, Field: "cursor", Message: webhookd.ErrorMessage(err), Err: err}
}

func (s *Server) handleGetResource(c *fiber.Ctx) error {
	source, err := s.sourceParam(c)
	if err != nil {
		return err
	}
	resource, err := param(c, "resource")
	if err != nil {
		return err
	}
	l, err := s.store.Latest(c.UserContext(), source, resource)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"version": l.Version, "request_id": l.RequestID, "updated_at": l.UpdatedAt})
}

// entryView is an outbox entry or dead letter as the admin API lists it:
// without the body and the passed-through headers, which may be sensitive.
type entryView struct {
	Source        string     `json:"source"`
	Route         string     `json:"route"`
	RequestID     string     `json:"request_id"`
	Resource      string     `json:"resource,omitempty"`
	Version       string     `json:"version,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	LastStatus    int        `json:"last_status,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	DeadAt        *time.Time `json:"dead_at,omitempty"`
}

// targetQuery returns what ?source= and ?route= select: every source, the
// one source=, or its one route=.
func (s *Server) targetQuery(c *fiber.Ctx) (forward.Target, error) {
	target := forward.Target{Source: query(c, "source"), Route: query(c, "route")}
	switch {
	case target.Source != "":
		if err := s.knownSource(target.Source); err != nil {
			return target, err
		}
		if target.Route != "" {
			return target, s.knownRoute(target.Source, target.Route)
		}
	case target.Route != "":
		// Route names are unique in their source only.
		return target, webhookd.FieldErrorf("route", "route= names a route of the source that source= names: give both")
	}
	return target, nil
}

// listEntries answers a page of a list of entries, of every source, of the
// one ?source= names, or of its one route ?route= names.
func (s *Server) listEntries(c *fiber.Ctx, list func(ctx context.Context, target forward.Target, page storage.Page) ([]forward.Entry, string, error)) error {
	target, err := s.targetQuery(c)
	if err != nil {
		return err
	}
	page, err := pageQuery(c)
	if err != nil {
		return err
	}
	entries, next, err := list(c.UserContext(), target, page)
	if err != nil {
		return cursorError(err)
	}
	items := make([]entryView, len(entries))
	for i, e := range entries {
		items[i] = entryView{
			Source: e.Source, Route: e.Route, RequestID: e.RequestID, Resource: e.Resource, Version: e.Version,
			CreatedAt: e.CreatedAt, Attempts: e.Attempts, LastStatus: e.LastStatus, LastError: e.LastError, DeadAt: e.DeadAt,
		}
		if e.DeadAt == nil {
			items[i].NextAttemptAt = &e.NextAttemptAt
		}
	}
	return c.JSON(fiber.Map{"items": items, "next_cursor": next})
}

func (s *Server) handleListOutbox(c *fiber.Ctx) error { return s.listEntries(c, s.store.Outbox) }
func (s *Server) handleListDeadLetters(c *fiber.Ctx) error {
	return s.listEntries(c, s.store.DeadLetters)
}

// repair runs one repair of a dead letter, on the target and request a
// path names, and answers what it did.
func (s *Server) repair(c *fiber.Ctx, status int, did webhookd.ForwardState, fn func(ctx context.Context, target forward.Target, requestID string) error) error {
	target, requestID, err := s.deadLetterParams(c)
	if err != nil {
		return err
	}
	if err := fn(c.UserContext(), target, requestID); err != nil {
		return err
	}
	return c.Status(status).JSON(fiber.Map{"source": target.Source, "route": target.Route, "request_id": requestID, "forward": did})
}

// handleRedeliver forwards a request again to the route ?route= names or,
// without one, to every route forward.Redeliverable allows.
func (s *Server) handleRedeliver(c *fiber.Ctx) error {
	source, requestID, err := s.requestParams(c)
	if err != nil {
		return err
	}
	route := strings.Clone(c.Query("route"))
	if route != "" {
		if err := s.knownRoute(source, route); err != nil {
			return err
		}
	}
	if err := s.store.Redeliver(c.UserContext(), source, requestID, route); err != nil {
		return err
	}
	did := fiber.Map{"source": source, "request_id": requestID, "forward": webhookd.ForwardPending}
	if route != "" {
		did["route"] = route
	}
	return c.Status(fiber.StatusAccepted).JSON(did)
}

func (s *Server) handleRetryDeadLetter(c *fiber.Ctx) error {
	return s.repair(c, fiber.StatusAccepted, webhookd.ForwardPending, s.store.RetryDeadLetter)
}

func (s *Server) handleDiscardDeadLetter(c *fiber.Ctx) error {
	return s.repair(c, fiber.StatusOK, webhookd.ForwardDiscarded, s.store.DiscardDeadLetter)
}

// bulkPage is how many dead letters one transaction of a bulk repair
// takes: enough that a night's dead letters take a handful of
// transactions, few enough that none holds its locks for long.
const bulkPage = 500

// bulkRepair runs a bulk repair of the dead letters ?source=, ?route=,
// ?since= and ?until= select, a page at a time until the last, and
// answers how many it did, under the name did, and how many it refused.
// Pages done before an error stay done: the same call again goes on with
// what is left.
func (s *Server) bulkRepair(c *fiber.Ctx, status int, did string, run func(ctx context.Context, q storage.DeadLetterQuery, page storage.Page) (storage.BulkResult, error)) error {
	target, err := s.targetQuery(c)
	if err != nil {
		return err
	}
	since, until, err := timeRange(c)
	if err != nil {
		return err
	}
	q := storage.DeadLetterQuery{Target: target, Since: since, Until: until}
	page := storage.Page{Limit: bulkPage}
	var done, refused int
	for {
		res, err := run(c.UserContext(), q, page)
		if err != nil {
			return err
		}
		done += res.Done
		refused += res.Refused
		if res.Next == "" {
			break
		}
		page.Cursor = res.Next
	}
	return c.Status(status).JSON(fiber.Map{did: done, "refused": refused})
}

func (s *Server) handleRetryDeadLetters(c *fiber.Ctx) error {
	return s.bulkRepair(c, fiber.StatusAccepted, "retried", s.store.RetryDeadLetters)
}

func (s *Server) handleDiscardDeadLetters(c *fiber.Ctx) error {
	return s.bulkRepair(c, fiber.StatusOK, "discarded", s.store.DiscardDeadLetters)
}

// routeView is a configured route as GET /admin/routes shows it: where it
// sends (the URL's host only, as a URL may hold credentials), its limits,
// the state of its sends and its backlog.
type routeView struct {
	Source  string          `json:"source"`
	Route   string          `json:"route"`
	Host    string          `json:"host"`
	Rate    string          `json:"rate,omitempty"`
	Burst   int             `json:"burst,omitempty"`
	Breaker *breakerView    `json:"breaker,omitempty"`
	Paused  bool            `json:"paused"`
	Circuit forward.Circuit `json:"circuit"`
	// OpenUntil is when an open breaker lets a probe through.
	OpenUntil *time.Time `json:"open_until,omitempty"`
	// Failures is the run of retryable failures the breaker has counted.
	Failures    int `json:"failures"`
	Pending     int `json:"pending"`
	DeadLetters int `json:"dead_letters"`
}

type breakerView struct {
	Failures    int    `json:"failures"`
	Cooldown    string `json:"cooldown"`
	MaxCooldown string `json:"max_cooldown"`
}

// handleListRoutes answers every configured route, by source name and in
// its source's order.
func (s *Server) handleListRoutes(c *fiber.Ctx) error {
	ctx := c.UserContext()
	states, err := s.store.RouteStates(ctx)
	if err != nil {
		return err
	}
	pending, err := s.store.Pending(ctx)
	if err != nil {
		return err
	}
	dead, err := s.store.DeadLetterCounts()
	if err != nil {
		return err
	}
	items := []routeView{}
	for _, name := range slices.Sorted(maps.Keys(s.sources)) {
		for _, r := range s.sources[name].Routes {
			target := forward.Target{Source: name, Route: r.Name}
			v := routeView{Source: name, Route: r.Name, Rate: r.Rate, Burst: r.Burst, Pending: pending[target], DeadLetters: dead[target]}
			if u, err := url.Parse(r.URL); err == nil {
				v.Host = u.Host
			}
			if r.Breaker.Failures > 0 {
				v.Breaker = &breakerView{Failures: r.Breaker.Failures, Cooldown: r.Breaker.Cooldown.String(), MaxCooldown: r.Breaker.MaxCooldown.String()}
			}
			st := states[target]
			v.Paused, v.Circuit, v.Failures = st.Paused, st.Circuit, st.Failures
			switch st.Circuit {
			case "":
				v.Circuit = forward.Closed
			case forward.Open:
				v.OpenUntil = &st.OpenUntil
			}
			items = append(items, v)
		}
	}
	return c.JSON(fiber.Map{"items": items})
}

// handlePause pauses or resumes the route a path names, for every replica
// and across restarts.
func (s *Server) handlePause(paused bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		target, err := s.routeParams(c)
		if err != nil {
			return err
		}
		if err := s.store.Pause(c.UserContext(), target, paused); err != nil {
			return err
		}
		return c.JSON(fiber.Map{"source": target.Source, "route": target.Route, "paused": paused})
	}
}
