package console

import (
	"cmp"
	"context"
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

// maxRows bounds the entries a dead letter or outbox table shows.
const maxRows = 500

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
	Unknown bool // the requests to no configured source
	Intake  []metric
	Reasons []reasonCount
	Forward []metric
	Latency metric // mean forward attempt per minute, in µs
	Mean    time.Duration
	Slowest time.Duration
	Queues  []routeQueues
}

// routeQueues is one route's outbox and dead letters on the overview.
type routeQueues struct {
	Route  string
	Filter string // the queue pages' filter that shows this route
	Outbox int    // -1: not known
	Dead   int    // -1: not known
	// Gone says the configuration no longer has the route: nothing
	// forwards its entries (the forwarder dead-letters them).
	Gone bool
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
	Quiet   bool   // nothing at all in the window
	Forward bool   // some source forwards
}

func (c *Console) handleOverview(fc *fiber.Ctx) error {
	ctx := fc.UserContext()
	counts := c.counts()
	ov := overview{Ready: c.records.Ready(), Quiet: true}
	if u, err := c.Disk.Usage(ctx); err == nil {
		ov.Usage = &u
	} else {
		ov.NoUsage = err.Error()
	}
	pending, err := c.records.Pending(ctx)
	var dead map[forward.Target]int
	if err == nil {
		dead, err = c.records.DeadLetterCounts()
	}
	if err != nil {
		ov.Queues = webhookd.ErrorMessage(err)
	}
	stats := func(s Source, ct *Counts) sourceStats {
		st := sourceStats{Source: s}
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
		st.Queues = routeQueuesOf(s, pending, dead, ov.Queues == "")
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
	return c.render(fc, fiber.StatusOK, "overview", page{Title: "Overview", Nav: "overview", Data: ov})
}

// routeQueuesOf returns the outbox and dead letters of each of s's routes,
// in configuration order, then those of routes the configuration no longer
// has that still hold entries. known is false when the counts could not be
// read.
func routeQueuesOf(s Source, pending, dead map[forward.Target]int, known bool) []routeQueues {
	var out []routeQueues
	add := func(route string, gone bool) {
		q := routeQueues{Route: route, Filter: forward.Target{Source: s.Name, Route: route}.String(), Outbox: -1, Dead: -1, Gone: gone}
		if known {
			t := forward.Target{Source: s.Name, Route: route}
			q.Outbox, q.Dead = pending[t], dead[t]
		}
		out = append(out, q)
	}
	for _, r := range s.Routes {
		add(r, false)
	}
	var gone []string
	for _, m := range []map[forward.Target]int{pending, dead} {
		for t := range m {
			if t.Source == s.Name && !slices.Contains(s.Routes, t.Route) && !slices.Contains(gone, t.Route) {
				gone = append(gone, t.Route)
			}
		}
	}
	slices.Sort(gone)
	for _, r := range gone {
		add(r, true)
	}
	return out
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
	return c.render(fc, status, "receipt", page{Title: "Receipt", Nav: "receipt", Notice: n, Data: rp})
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

// queuePage is the dead letters or the outbox, one table per source.
type queuePage struct {
	Dead bool
	// Filter is the target shown, as the page's filter names it: source,
	// source/route, or "" for every source.
	Filter  string
	Groups  []entryGroup
	Confirm *discardConfirm // the dead letter a discard asks to confirm
	Forward bool            // some source forwards
}

// discardConfirm is a dead letter about to be discarded, and what
// discarding it leaves, in words.
type discardConfirm struct {
	forward.Entry
	After string
}

type entryGroup struct {
	Source  string
	Entries []forward.Entry
	Total   int
	Hidden  int // entries past maxRows
}

// parseTarget reads a queue page's filter: source, source/route, or ""
// for every source. Source and route names have no '/'.
func parseTarget(filter string) forward.Target {
	source, route, _ := strings.Cut(filter, "/")
	return forward.Target{Source: source, Route: route}
}

func (c *Console) queue(fc *fiber.Ctx, dead bool, status int, n *notice, confirm *discardConfirm) error {
	qp := queuePage{Dead: dead, Filter: form(fc, "filter"), Confirm: confirm}
	list, nav, title := c.records.Outbox, "outbox", "Outbox"
	if dead {
		list, nav, title = c.records.DeadLetters, "deadletters", "Dead letters"
	}
	entries, err := list(fc.UserContext(), parseTarget(qp.Filter))
	if err != nil {
		return err
	}
	slices.SortStableFunc(entries, func(a, b forward.Entry) int { return cmp.Compare(a.Source, b.Source) })
	for _, e := range entries {
		if len(qp.Groups) == 0 || qp.Groups[len(qp.Groups)-1].Source != e.Source {
			qp.Groups = append(qp.Groups, entryGroup{Source: e.Source})
		}
		g := &qp.Groups[len(qp.Groups)-1]
		g.Total++
		if len(g.Entries) < maxRows {
			g.Entries = append(g.Entries, e)
		} else {
			g.Hidden++
		}
	}
	for _, s := range c.sources {
		qp.Forward = qp.Forward || s.Forwards()
	}
	return c.render(fc, status, "queue", page{Title: title, Nav: nav, Notice: n, Data: qp})
}

func (c *Console) handleDeadLetters(fc *fiber.Ctx) error {
	return c.queue(fc, true, fiber.StatusOK, nil, nil)
}

func (c *Console) handleOutbox(fc *fiber.Ctx) error {
	return c.queue(fc, false, fiber.StatusOK, nil, nil)
}

// deadLetterOf reads the dead letter a retry or discard form names: its
// target and request ID.
func deadLetterOf(fc *fiber.Ctx) (forward.Target, string) {
	return forward.Target{Source: form(fc, "source"), Route: form(fc, "route")}, form(fc, "request_id")
}

func (c *Console) handleRetry(fc *fiber.Ctx) error {
	target, id := deadLetterOf(fc)
	if err := c.records.RetryDeadLetter(fc.UserContext(), target, id); err != nil {
		return c.queue(fc, true, statusOf(err), &notice{Text: "Not retried: " + webhookd.ErrorMessage(err)}, nil)
	}
	return c.queue(fc, true, fiber.StatusAccepted, &notice{OK: true, Text: target.String() + "/" + id + " is back in the outbox, with its attempts reset."}, nil)
}

// handleDiscard asks first: without confirm=yes it shows the dead letter,
// what discarding it leaves, and a button that discards it.
func (c *Console) handleDiscard(fc *fiber.Ctx) error {
	target, id := deadLetterOf(fc)
	if fc.FormValue("confirm") != "yes" {
		confirm, err := c.discarding(fc.UserContext(), target, id)
		if err != nil {
			return c.queue(fc, true, statusOf(err), &notice{Text: "Not discarded: " + webhookd.ErrorMessage(err)}, nil)
		}
		return c.queue(fc, true, fiber.StatusOK, nil, confirm)
	}
	if err := c.records.DiscardDeadLetter(fc.UserContext(), target, id); err != nil {
		return c.queue(fc, true, statusOf(err), &notice{Text: "Not discarded: " + webhookd.ErrorMessage(err)}, nil)
	}
	return c.queue(fc, true, fiber.StatusOK, &notice{OK: true, Text: target.String() + "/" + id + " is discarded: nothing more is sent to route " + target.Route + ", and its receipt says discarded there."}, nil)
}

// discarding reads what the confirmation of a discard tells: the dead
// letter, the receipt its request ID has now and its resource's latest
// version.
func (c *Console) discarding(ctx context.Context, target forward.Target, id string) (*discardConfirm, error) {
	if target.Source == "" || target.Route == "" {
		return nil, webhookd.Errorf(webhookd.EINVALID, "a dead letter is named by its source, route and request ID")
	}
	dead, err := c.records.DeadLetters(ctx, target)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(dead, func(e forward.Entry) bool { return e.RequestID == id })
	if i < 0 {
		return nil, webhookd.Errorf(webhookd.ENOTFOUND, "no dead letter for %s/%s", target, id)
	}
	e := dead[i]
	held, err := c.records.Receipt(ctx, target.Source, id)
	if webhookd.ErrorCode(err) == webhookd.ENOTFOUND {
		held, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	var latest *versioning.Latest
	if e.Resource != "" && e.Version != "" {
		latest, err = c.records.Latest(ctx, target.Source, e.Resource)
		if webhookd.ErrorCode(err) == webhookd.ENOTFOUND {
			latest, err = nil, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return &discardConfirm{Entry: e, After: afterDiscard(&e, held, latest, c.receiptTTL, c.now())}, nil
}

// afterDiscard says what discarding dead letter e leaves. Discarding
// removes the dead letter only: the receipt stays, marked discarded, and a
// redelivery from it is taken while the redelivery rules allow it and the
// payload is held, which is receipt_ttl after the request was last queued,
// so no earlier than receipt_ttl after it was accepted. held is the
// receipt its request ID has now and latest its resource's latest
// version, nil when none.
func afterDiscard(e *forward.Entry, held *dedupe.Receipt, latest *versioning.Latest, ttl time.Duration, now time.Time) string {
	const removes = "Removes this dead letter: nothing more is sent. "
	if _, own := forward.Discarded(e, held); !own {
		if held == nil {
			return removes + "Its receipt has expired, so nothing can send this request again."
		}
		return removes + "Its request ID came back since as a new request, which is forwarded on its own; this one cannot be sent again."
	}
	if e.BodyLost {
		return removes + "Its payload expired before it was forwarded, so nothing can send this request again."
	}
	if err := forward.CanResend(e, latest); err != nil {
		return removes + "It cannot be sent again: " + webhookd.ErrorMessage(err) + "."
	}
	stays := removes + "Its receipt stays, marked discarded on route " + e.Route + ", and Redeliver to " + e.Route + " on the receipt can send the request again"
	if until := e.CreatedAt.Add(ttl); until.After(now) {
		return stays + " until its payload expires, not before " + utc(until) + " (receipt_ttl after it was accepted)."
	}
	return stays + " while its payload is held: receipt_ttl after it was last queued."
}
