package console

import (
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/versioning"
)

// form returns a form or query value, copied: Fiber's point into the
// request buffer, which outlives neither the handler nor the next request.
func form(fc *fiber.Ctx, key string) string {
	return strings.TrimSpace(strings.Clone(fc.FormValue(key)))
}

func (c *Console) handleLoginPage(fc *fiber.Ctx) error {
	if c.auth.token == nil {
		return errDisabled()
	}
	return c.render(fc, fiber.StatusOK, "login", page{Title: "Log in", Data: safeNext(form(fc, "next"))})
}

func (c *Console) handleLogin(fc *fiber.Ctx) error {
	if c.auth.token == nil {
		return errDisabled()
	}
	if err := sameOrigin(fc); err != nil {
		return err
	}
	next := safeNext(form(fc, "next"))
	if !c.auth.tokenOK(fc.FormValue("token")) {
		return c.render(fc, fiber.StatusUnauthorized, "login", page{Title: "Log in", Data: next,
			Notice: &notice{Text: "That is not the admin token. It is admin.token in the configuration."}})
	}
	expires := c.now().Add(sessionLife)
	c.setSession(fc, c.auth.session(expires), expires)
	return fc.Redirect(next, fiber.StatusSeeOther)
}

func (c *Console) handleLogout(fc *fiber.Ctx) error {
	c.setSession(fc, "", time.Unix(0, 0))
	return fc.Redirect("/ui/login", fiber.StatusSeeOther)
}

// metric is one row of the overview: a count per minute and its total.
type metric struct {
	Name  string
	Row   [historyMinutes]int64
	Total int64
	Unit  string
}

// sourceStats is one source on the overview.
type sourceStats struct {
	Source
	Unknown   bool // the requests to no configured source
	Intake    []metric
	Reasons   []reasonCount
	Forward   []metric
	Latency   metric // mean forward attempt per minute, in µs
	Mean      time.Duration
	Slowest   time.Duration
	RouteRows []routeSummary
	CSRF      string // for the routes' pause and resume
}

type reasonCount struct {
	Reason string
	N      int64
}

type overview struct {
	Sources []sourceStats
	Unknown *sourceStats // requests to no configured source, when there were any
	Ready   error
	Usage   *Usage
	NoUsage string
	Queues  string // why outbox and dead letters are not known, or ""
	States  string // why the routes' states are not known, or ""
	Quiet   bool   // nothing at all in the window
	Forward bool   // some source forwards
}

func (c *Console) handleOverview(fc *fiber.Ctx) error {
	return c.overview(fc, fiber.StatusOK, nil)
}

// overview renders the overview, with the notice of an action taken on
// it.
func (c *Console) overview(fc *fiber.Ctx, status int, n *notice) error {
	ctx := fc.UserContext()
	counts := c.counts()
	ov := overview{Ready: c.records.Ready(), Quiet: true}
	if u, err := c.Disk.Usage(ctx); err == nil {
		ov.Usage = &u
	} else {
		ov.NoUsage = err.Error()
	}
	facts, queuesErr, statesErr := c.readRoutes(ctx)
	if queuesErr != nil {
		ov.Queues = webhookd.ErrorMessage(queuesErr)
	}
	if statesErr != nil {
		ov.States = webhookd.ErrorMessage(statesErr)
	}
	stats := func(s Source, ct *Counts) sourceStats {
		st := sourceStats{Source: s, CSRF: c.csrfOf(fc)}
		for i, name := range decisions[:4] {
			st.Intake = append(st.Intake, metric{Name: name, Row: ct.Decisions[i], Total: total(ct.Decisions[i])})
		}
		st.Intake = append(st.Intake, metric{Name: rejected, Row: ct.Rejected, Total: total(ct.Rejected)})
		for i, n := range ct.Reasons {
			if n > 0 {
				st.Reasons = append(st.Reasons, reasonCount{reasons[i], n})
			}
		}
		for i, name := range forwardResults {
			st.Forward = append(st.Forward, metric{Name: name, Row: ct.Forwards[i], Total: total(ct.Forwards[i])})
		}
		st.Latency = metric{Name: "latency", Unit: "µs, mean attempt"}
		for i, d := range ct.Latency {
			st.Latency.Row[i] = d.Microseconds()
		}
		st.Mean, st.Slowest = ct.Mean(), ct.Slowest
		for _, m := range append(st.Intake, st.Forward...) {
			if m.Total > 0 {
				ov.Quiet = false
			}
		}
		st.RouteRows = facts.of(s, c.now())
		return st
	}
	for _, s := range c.sources {
		ov.Sources = append(ov.Sources, stats(s, counts[s.Name]))
		ov.Forward = ov.Forward || s.Forwards()
	}
	if ct := counts[configs.UnknownSource]; total(ct.Rejected) > 0 {
		st := stats(Source{Name: configs.UnknownSource}, ct)
		st.Unknown, st.Intake = true, st.Intake[len(st.Intake)-1:] // nothing but refusals
		ov.Unknown = &st
	}
	return c.render(fc, status, "overview", page{Title: "Overview", Nav: "overview", Notice: n, Data: ov})
}

type tailPage struct {
	Source, Decision string
	Decisions        []string
	Events           []Event // newest first
	After            uint64  // the stream starts after this event
}

// tailRows is how many held events the tail page opens with.
const tailRows = 100

func (c *Console) handleTail(fc *fiber.Ctx) error {
	f := filter{source: form(fc, "source"), decision: form(fc, "decision")}
	events, after := c.recent(f, tailRows)
	slices.Reverse(events)
	tp := tailPage{Source: f.source, Decision: f.decision, Decisions: decisions, Events: events, After: after}
	return c.render(fc, fiber.StatusOK, "tail", page{Title: "Live tail", Nav: "tail", Data: tp})
}

type receiptPage struct {
	Source, RequestID string
	Receipt           *dedupe.Receipt
	Risks             []string
	Latest            *versioning.Latest // the resource's latest version now
	Routes            []routeRow         // the receipt's routes, each with what may be done there
	Offers            bool               // some route offers a redelivery
	// All names the routes a redelivery to all would requeue, when there
	// are more than one; Refusal says why there is no redelivery at all.
	All     []string
	Refusal string
	Omitted int    // arrivals the receipt no longer lists
	Missing string // why there is no receipt to show
}

// routeRow is one route of a receipt: its forward status, and whether the
// admin API would take a redelivery to it, or why not, in words.
type routeRow struct {
	webhookd.RouteStatus
	Filter     string // the queue pages' filter that shows this route
	Redeliver  bool
	Refusal    string
	DeadLetter bool // the refusal points to the dead letters page
}

func (c *Console) handleReceipt(fc *fiber.Ctx) error {
	return c.showReceipt(fc, fiber.StatusOK, nil)
}

// showReceipt renders the receipt the form names, with the notice of an
// action taken on it.
func (c *Console) showReceipt(fc *fiber.Ctx, status int, n *notice) error {
	rp := receiptPage{Source: form(fc, "source"), RequestID: form(fc, "request_id")}
	if rp.Source != "" && rp.RequestID != "" {
		r, err := c.records.Receipt(fc.UserContext(), rp.Source, rp.RequestID)
		switch {
		case webhookd.ErrorCode(err) == webhookd.ENOTFOUND:
			rp.Missing = "No receipt for request ID " + rp.RequestID + " of source " + rp.Source + ". Check the spelling and the source; a receipt is kept for receipt_ttl after the last delivery of its request ID."
			if status == fiber.StatusOK {
				status = fiber.StatusNotFound
			}
		case err != nil:
			return err
		default:
			rp.Receipt, rp.Risks = r, r.ResidualRisk()
			rp.Omitted = r.Attempts - len(r.Deliveries)
			if r.Resource != "" {
				if l, err := c.records.Latest(fc.UserContext(), r.Source, r.Resource); err == nil {
					rp.Latest = l
				}
			}
			for _, rs := range r.Routes {
				row := routeRow{RouteStatus: rs, Filter: forward.Target{Source: r.Source, Route: rs.Route}.String()}
				row.Redeliver, row.Refusal, row.DeadLetter = redeliverable(r, rs.Route, rp.Latest)
				rp.Routes = append(rp.Routes, row)
				rp.Offers = rp.Offers || row.Redeliver
			}
			all, err := redeliverableAll(r, rp.Latest)
			switch {
			case err != nil:
				rp.Refusal = webhookd.ErrorMessage(err) + "."
			case len(all) > 1:
				rp.All = all
			}
		}
	}
	return c.render(fc, status, "receipt", page{Title: "Receipt", Nav: "receipts", Notice: n, Data: rp})
}

// redeliverable says whether the admin API would take a redelivery of r to
// route, as far as the receipt and its resource's latest version tell, by
// the rules the stores apply: the store also refuses one whose payload
// expired, which it alone knows, and its answer is shown when the button
// is used.
func redeliverable(r *dedupe.Receipt, route string, latest *versioning.Latest) (ok bool, refusal string, deadLetter bool) {
	// CanRedeliver refuses a dead letter too, naming the admin API's call;
	// the console points to its own page instead.
	if rs := r.Route(route); rs != nil && rs.State == webhookd.ForwardDead {
		return false, "it is a dead letter: retry it from the dead letters.", true
	}
	err := forward.CanRedeliver(r, route)
	if err == nil {
		err = canResend(r, latest)
	}
	if err != nil {
		return false, webhookd.ErrorMessage(err) + ".", false
	}
	return true, "", false
}

// redeliverableAll returns the routes a redelivery that names none would
// requeue (forward.Redeliverable), or why it would be refused.
func redeliverableAll(r *dedupe.Receipt, latest *versioning.Latest) ([]string, error) {
	routes, err := forward.Redeliverable(r)
	if err == nil {
		err = canResend(r, latest)
	}
	if err != nil {
		return nil, err
	}
	return routes, nil
}

// canResend applies forward.CanResend to r's request: every route's entry
// carries the same resource and version.
func canResend(r *dedupe.Receipt, latest *versioning.Latest) error {
	return forward.CanResend(&forward.Entry{Source: r.Source, RequestID: r.RequestID, Resource: r.Resource, Version: r.Version}, latest)
}

// handleRedeliver redelivers to the route the form names, or, with none,
// to every route forward.Redeliverable allows.
func (c *Console) handleRedeliver(fc *fiber.Ctx) error {
	route := form(fc, "route")
	err := c.records.Redeliver(fc.UserContext(), form(fc, "source"), form(fc, "request_id"), route)
	if err != nil {
		return c.showReceipt(fc, statusOf(err), &notice{Text: "Not redelivered: " + webhookd.ErrorMessage(err)})
	}
	to := "to each route whose forwarding had ended"
	if route != "" {
		to = "to route " + route
	}
	return c.showReceipt(fc, fiber.StatusAccepted, &notice{OK: true, Text: "Queued for forwarding again " + to + ", with the same Idempotency-Key."})
}

type resourcePage struct {
	Source, Resource string
	Latest           *versioning.Latest
	Missing          string
}

func (c *Console) handleResource(fc *fiber.Ctx) error {
	rp := resourcePage{Source: form(fc, "source"), Resource: form(fc, "resource")}
	status := fiber.StatusOK
	if rp.Source != "" && rp.Resource != "" {
		l, err := c.records.Latest(fc.UserContext(), rp.Source, rp.Resource)
		switch {
		case webhookd.ErrorCode(err) == webhookd.ENOTFOUND:
			rp.Missing = "No accepted version of resource " + rp.Resource + " of source " + rp.Source + ". Only sources with a resource and a version selector keep one."
			status = fiber.StatusNotFound
		case err != nil:
			return err
		default:
			rp.Latest = l
		}
	}
	return c.render(fc, status, "resource", page{Title: "Resource", Nav: "resource", Data: rp})
}
