package console

import (
	"net/url"
	"slices"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/dedupe"
	"github.com/webhookd/webhookd/storage"
)

// receiptDecisions are the decisions a receipt holds: that of its first
// delivery. Duplicates and conflicts are later deliveries of a receipt.
var receiptDecisions = []string{string(webhookd.Accepted), string(webhookd.Stale)}

// forwardStates are the states a route of a receipt may be in, as the
// receipts page offers them.
var forwardStates = []string{string(webhookd.ForwardPending), string(webhookd.ForwardRetrying), string(webhookd.ForwardDelivered),
	string(webhookd.ForwardDead), string(webhookd.ForwardDiscarded), string(webhookd.ForwardSuperseded)}

// receiptsPage is one page of a receipt search, newest first.
type receiptsPage struct {
	// The search as its form gives it: Filter is a source, source/route,
	// or "" for every source.
	Filter, Decision, Resource, State, Since, Until string
	Limit                                           int
	Cursor                                          string
	Decisions, States                               []string
	Receipts                                        []dedupe.Receipt
	pager
	// Short says a page shorter than its size has a next one: the
	// filters left few of the receipts the page read.
	Short    bool
	Examined int // the most receipts of the index one page reads
}

// Filtered says the search narrows the receipts.
func (rp *receiptsPage) Filtered() bool {
	return rp.Filter != "" || rp.Decision != "" || rp.Resource != "" || rp.State != "" || rp.Since != "" || rp.Until != ""
}

func (c *Console) handleReceipts(fc *fiber.Ctx) error {
	rp := receiptsPage{Filter: form(fc, "filter"), Decision: form(fc, "decision"), Resource: form(fc, "resource"), State: form(fc, "forward_state"),
		Since: form(fc, "since"), Until: form(fc, "until"), Decisions: receiptDecisions, States: forwardStates, Examined: storage.MaxExamined}
	show := func(status int, n *notice) error {
		return c.render(fc, status, "receipts", page{Title: "Receipts", Nav: "receipts", Notice: n, Data: &rp})
	}
	q, err := rp.query(fc)
	if err != nil {
		return show(statusOf(err), &notice{Text: "Not searched: " + webhookd.ErrorMessage(err)})
	}
	rp.Limit, rp.Cursor = q.Limit, q.Cursor
	items, next, err := c.records.Receipts(fc.UserContext(), q)
	if err != nil {
		return show(statusOf(err), &notice{Text: "Not searched: " + webhookd.ErrorMessage(err)})
	}
	rp.Receipts = items
	query := url.Values{"filter": {rp.Filter}, "decision": {rp.Decision}, "resource": {rp.Resource}, "forward_state": {rp.State},
		"since": {rp.Since}, "until": {rp.Until}}
	if rp.Limit > 0 {
		query.Set("limit", strconv.Itoa(rp.Limit))
	}
	rp.pager = pagerOf("/ui/receipts", query, rp.Cursor, next)
	rp.Short = next != "" && len(items) < q.Size()
	return show(fiber.StatusOK, nil)
}

// query reads the search rp's form asks for.
func (rp *receiptsPage) query(fc *fiber.Ctx) (storage.ReceiptQuery, error) {
	t := parseTarget(rp.Filter)
	q := storage.ReceiptQuery{Source: t.Source, Route: t.Route, Resource: rp.Resource,
		Decision: webhookd.Decision(rp.Decision), ForwardState: webhookd.ForwardState(rp.State)}
	var err error
	if q.Page, err = pageOf(fc); err != nil {
		return q, err
	}
	if rp.Decision != "" && !slices.Contains(rp.Decisions, rp.Decision) {
		return q, webhookd.Errorf(webhookd.EINVALID, "%q is not a decision", rp.Decision)
	}
	if rp.State != "" && !slices.Contains(rp.States, rp.State) {
		return q, webhookd.Errorf(webhookd.EINVALID, "%q is not a forward state", rp.State)
	}
	if q.Resource != "" && q.Source == "" {
		return q, webhookd.Errorf(webhookd.EINVALID, "a resource is named within its source: pick the source too")
	}
	q.Since, q.Until, err = timeRange(fc)
	return q, err
}
