package gateway

import (
	"context"
	"crypto/subtle"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
)

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
	if target.Source, requestID, err = s.requestParams(c); err != nil {
		return target, "", err
	}
	if target.Route, err = param(c, "route"); err != nil {
		return target, "", err
	}
	return target, requestID, s.knownRoute(target.Source, target.Route)
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
	r, err := s.records.Receipt(c.UserContext(), source, requestID)
	if err != nil {
		return err
	}
	return c.JSON(receiptView{Receipt: r, ResidualRisk: r.ResidualRisk()})
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
	l, err := s.records.Latest(c.UserContext(), source, resource)
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

// listEntries answers a list of entries, of every source, of the one
// ?source= names, or of its one route ?route= names.
func (s *Server) listEntries(c *fiber.Ctx, list func(ctx context.Context, target forward.Target) ([]forward.Entry, error)) error {
	target := forward.Target{Source: strings.Clone(c.Query("source")), Route: strings.Clone(c.Query("route"))}
	switch {
	case target.Source != "":
		if err := s.knownSource(target.Source); err != nil {
			return err
		}
		if target.Route != "" {
			if err := s.knownRoute(target.Source, target.Route); err != nil {
				return err
			}
		}
	case target.Route != "":
		// Route names are unique in their source only.
		return webhookd.FieldErrorf("route", "route= names a route of the source that source= names: give both")
	}
	entries, err := list(c.UserContext(), target)
	if err != nil {
		return err
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
	return c.JSON(fiber.Map{"items": items})
}

func (s *Server) handleListOutbox(c *fiber.Ctx) error { return s.listEntries(c, s.records.Outbox) }
func (s *Server) handleListDeadLetters(c *fiber.Ctx) error {
	return s.listEntries(c, s.records.DeadLetters)
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
	if err := s.records.Redeliver(c.UserContext(), source, requestID, route); err != nil {
		return err
	}
	did := fiber.Map{"source": source, "request_id": requestID, "forward": webhookd.ForwardPending}
	if route != "" {
		did["route"] = route
	}
	return c.Status(fiber.StatusAccepted).JSON(did)
}

func (s *Server) handleRetryDeadLetter(c *fiber.Ctx) error {
	return s.repair(c, fiber.StatusAccepted, webhookd.ForwardPending, s.records.RetryDeadLetter)
}

func (s *Server) handleDiscardDeadLetter(c *fiber.Ctx) error {
	return s.repair(c, fiber.StatusOK, webhookd.ForwardDiscarded, s.records.DiscardDeadLetter)
}
