package console

import (
	"cmp"
	"context"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/storage"
	"github.com/webhookd/webhookd/versioning"
)

// queuePage is one page of the dead letters or the outbox, one table per
// source.
type queuePage struct {
	Dead bool
	// Filter is the target shown, as the page's filter names it: source,
	// source/route, or "" for every source.
	Filter string
	// Limit is the page size the address asks for, 0 for the default, and
	// Cursor where the page starts, "" for the first.
	Limit  int
	Cursor string
	pager
	Groups []entryGroup
	// Total is how many entries the filter selects in all, -1 when not
	// known.
	Total   int
	Confirm *discardConfirm // the dead letter a discard asks to confirm
	Bulk    *bulkConfirm    // the bulk repair asked to confirm
	Forward bool            // some source forwards
}

// pager links a list's pages: the next, "" after the last, and the first,
// "" on the first.
type pager struct {
	Next, First string
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
	Total   int // the source's entries the filter selects, -1 when not known
}

// parseTarget reads a filter: source, source/route, or "" for every
// source. Source and route names have no '/'.
func parseTarget(filter string) forward.Target {
	source, route, _ := strings.Cut(filter, "/")
	return forward.Target{Source: source, Route: route}
}

// pageOf reads the page a list's address asks for.
func pageOf(fc *fiber.Ctx) (storage.Page, error) {
	p := storage.Page{Cursor: form(fc, "cursor")}
	if l := form(fc, "limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > storage.MaxLimit {
			return p, webhookd.Errorf(webhookd.EINVALID, "limit %q is not a page size from 1 to %d", l, storage.MaxLimit)
		}
		p.Limit = n
	}
	return p, nil
}

// link is path with the query's non-empty values.
func link(path string, query url.Values) string {
	q := make(url.Values, len(query))
	for k, v := range query {
		if len(v) > 0 && v[0] != "" {
			q[k] = v
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// pagerOf links the pages around one of query's, whose next page starts
// at next.
func pagerOf(path string, query url.Values, cursor, next string) pager {
	var p pager
	if next != "" {
		q := maps.Clone(query)
		q.Set("cursor", next)
		p.Next = link(path, q)
	}
	if cursor != "" {
		p.First = link(path, query)
	}
	return p
}

// queue renders a page of the dead letters (qp.Dead) or the outbox that
// the form names, with the confirmation qp asks and the notice of an
// action.
func (c *Console) queue(fc *fiber.Ctx, qp queuePage, status int, n *notice) error {
	ctx := fc.UserContext()
	qp.Filter = form(fc, "filter")
	path, list, nav, title := "/ui/outbox", c.records.Outbox, "outbox", "Outbox"
	if qp.Dead {
		path, list, nav, title = "/ui/deadletters", c.records.DeadLetters, "deadletters", "Dead letters"
	}
	for _, s := range c.sources {
		qp.Forward = qp.Forward || s.Forwards()
	}
	pg, err := pageOf(fc)
	if err != nil {
		return err
	}
	qp.Limit, qp.Cursor = pg.Limit, pg.Cursor
	target := parseTarget(qp.Filter)
	entries, next, err := list(ctx, target, pg)
	if err != nil {
		return err
	}
	query := url.Values{"filter": {qp.Filter}}
	if qp.Limit > 0 {
		query.Set("limit", strconv.Itoa(qp.Limit))
	}
	qp.pager = pagerOf(path, query, qp.Cursor, next)
	counts, err := c.queueCounts(ctx, qp.Dead)
	slices.SortStableFunc(entries, func(a, b forward.Entry) int { return cmp.Compare(a.Source, b.Source) })
	for _, e := range entries {
		if len(qp.Groups) == 0 || qp.Groups[len(qp.Groups)-1].Source != e.Source {
			qp.Groups = append(qp.Groups, entryGroup{Source: e.Source, Total: -1})
		}
		g := &qp.Groups[len(qp.Groups)-1]
		g.Entries = append(g.Entries, e)
	}
	qp.Total = -1
	if err == nil {
		qp.Total = 0
		for t, n := range counts {
			if selects(target, t) {
				qp.Total += n
			}
		}
		for i := range qp.Groups {
			qp.Groups[i].Total = 0
			for t, n := range counts {
				if t.Source == qp.Groups[i].Source && selects(target, t) {
					qp.Groups[i].Total += n
				}
			}
		}
	}
	return c.render(fc, status, "queue", page{Title: title, Nav: nav, Notice: n, Data: qp})
}

// queueCounts is how many dead letters, or entries in the outbox, each
// route has.
func (c *Console) queueCounts(ctx context.Context, dead bool) (map[forward.Target]int, error) {
	if dead {
		return c.records.DeadLetterCounts()
	}
	return c.records.Pending(ctx)
}

// selects says whether filter, whose empty fields select every value,
// selects t.
func selects(filter, t forward.Target) bool {
	return (filter.Source == "" || filter.Source == t.Source) && (filter.Route == "" || filter.Route == t.Route)
}

func (c *Console) handleDeadLetters(fc *fiber.Ctx) error {
	return c.queue(fc, queuePage{Dead: true}, fiber.StatusOK, nil)
}

func (c *Console) handleOutbox(fc *fiber.Ctx) error {
	return c.queue(fc, queuePage{}, fiber.StatusOK, nil)
}

// deadLetterOf reads the dead letter a retry or discard form names: its
// target and request ID.
func deadLetterOf(fc *fiber.Ctx) (forward.Target, string) {
	return forward.Target{Source: form(fc, "source"), Route: form(fc, "route")}, form(fc, "request_id")
}

func (c *Console) handleRetry(fc *fiber.Ctx) error {
	target, id := deadLetterOf(fc)
	if err := c.records.RetryDeadLetter(fc.UserContext(), target, id); err != nil {
		return c.queue(fc, queuePage{Dead: true}, statusOf(err), &notice{Text: "Not retried: " + webhookd.ErrorMessage(err)})
	}
	return c.queue(fc, queuePage{Dead: true}, fiber.StatusAccepted, &notice{OK: true, Text: target.String() + "/" + id + " is back in the outbox, with its attempts reset."})
}

// handleDiscard asks first: without confirm=yes it shows the dead letter,
// what discarding it leaves, and a button that discards it.
func (c *Console) handleDiscard(fc *fiber.Ctx) error {
	target, id := deadLetterOf(fc)
	if fc.FormValue("confirm") != "yes" {
		confirm, err := c.discarding(fc.UserContext(), target, id)
		if err != nil {
			return c.queue(fc, queuePage{Dead: true}, statusOf(err), &notice{Text: "Not discarded: " + webhookd.ErrorMessage(err)})
		}
		return c.queue(fc, queuePage{Dead: true, Confirm: confirm}, fiber.StatusOK, nil)
	}
	if err := c.records.DiscardDeadLetter(fc.UserContext(), target, id); err != nil {
		return c.queue(fc, queuePage{Dead: true}, statusOf(err), &notice{Text: "Not discarded: " + webhookd.ErrorMessage(err)})
	}
	return c.queue(fc, queuePage{Dead: true}, fiber.StatusOK, &notice{OK: true, Text: target.String() + "/" + id + " is discarded: nothing more is sent to route " + target.Route + ", and its receipt says discarded there."})
}

// deadLetter finds the dead letter of target with request ID id, reading
// the route's dead letters a page at a time.
func (c *Console) deadLetter(ctx context.Context, target forward.Target, id string) (*forward.Entry, error) {
	pg := storage.Page{Limit: storage.MaxLimit}
	for {
		dead, next, err := c.records.DeadLetters(ctx, target, pg)
		if err != nil {
			return nil, err
		}
		if i := slices.IndexFunc(dead, func(e forward.Entry) bool { return e.RequestID == id }); i >= 0 {
			return &dead[i], nil
		}
		if next == "" {
			return nil, webhookd.Errorf(webhookd.ENOTFOUND, "no dead letter for %s/%s", target, id)
		}
		pg.Cursor = next
	}
}

// discarding reads what the confirmation of a discard tells: the dead
// letter, the receipt its request ID has now and its resource's latest
// version.
func (c *Console) discarding(ctx context.Context, target forward.Target, id string) (*discardConfirm, error) {
	if target.Source == "" || target.Route == "" {
		return nil, webhookd.Errorf(webhookd.EINVALID, "a dead letter is named by its source, route and request ID")
	}
	e, err := c.deadLetter(ctx, target, id)
	if err != nil {
		return nil, err
	}
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
	return &discardConfirm{Entry: *e, After: afterDiscard(e, held, latest, c.receiptTTL, c.now())}, nil
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
