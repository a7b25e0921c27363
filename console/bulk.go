package console

import (
	"context"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// bulkBatch is how many dead letters one transaction of a bulk repair
// takes, as many as the admin API's.
const bulkBatch = 500

// bulkConfirm is a bulk repair of dead letters asked to confirm: what it
// does, to how many, and what that leaves, in words.
type bulkConfirm struct {
	Retry        bool // else discard
	Since, Until string
	N            int
	Of           string
	After        string
}

// whenLayouts are the times a form may give: a datetime-local input's, to
// the minute or the second, in UTC as every time of the console, or
// RFC 3339.
var whenLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano}

// parseWhen reads the time of a form's field name; "" is none.
func parseWhen(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range whenLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, webhookd.Errorf(webhookd.EINVALID, "%s %q is not a time: write it as 2026-12-02T14:30, in UTC", name, v)
}

// timeRange reads the since and until fields of a form: since <= t < until.
func timeRange(fc *fiber.Ctx) (since, until time.Time, err error) {
	if since, err = parseWhen("since", form(fc, "since")); err != nil {
		return
	}
	if until, err = parseWhen("until", form(fc, "until")); err != nil {
		return
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		err = webhookd.Errorf(webhookd.EINVALID, "until must be after since")
	}
	return
}

// deadLettersOf words the dead letters q selects.
func deadLettersOf(q storage.DeadLetterQuery) string {
	s := "dead letters of every source"
	switch {
	case q.Target.Route != "":
		s = "dead letters of " + q.Target.String()
	case q.Target.Source != "":
		s = "dead letters of " + q.Target.Source
	}
	switch {
	case !q.Since.IsZero() && !q.Until.IsZero():
		s += " that died from " + utc(q.Since) + " to " + utc(q.Until)
	case !q.Since.IsZero():
		s += " that died since " + utc(q.Since)
	case !q.Until.IsZero():
		s += " that died before " + utc(q.Until)
	}
	return s
}

// countDeadLetters counts the dead letters q selects: from the routes'
// counts when it names no time range, else by reading them a page at a
// time.
func (c *Console) countDeadLetters(ctx context.Context, q storage.DeadLetterQuery) (int, error) {
	n := 0
	if q.Since.IsZero() && q.Until.IsZero() {
		counts, err := c.records.DeadLetterCounts()
		for t, k := range counts {
			if selects(q.Target, t) {
				n += k
			}
		}
		return n, err
	}
	pg := storage.Page{Limit: storage.MaxLimit}
	for {
		dead, next, err := c.records.DeadLetters(ctx, q.Target, pg)
		if err != nil {
			return 0, err
		}
		for _, e := range dead {
			if e.DeadAt != nil && !e.DeadAt.Before(q.Since) && (q.Until.IsZero() || e.DeadAt.Before(q.Until)) {
				n++
			}
		}
		if next == "" {
			return n, nil
		}
		pg.Cursor = next
	}
}

// handleBulk retries or discards every dead letter the filter and time
// range select. It asks first: without confirm=yes it shows how many it
// would take, what that does, and a button that does it.
func (c *Console) handleBulk(fc *fiber.Ctx) error {
	ctx := fc.UserContext()
	action := form(fc, "repair")
	if action != "retry" && action != "discard" {
		return webhookd.Errorf(webhookd.EINVALID, "a bulk repair is retry or discard, not %q", action)
	}
	retry, refusal := action == "retry", "Not discarded: "
	if retry {
		refusal = "Not retried: "
	}
	q := storage.DeadLetterQuery{Target: parseTarget(form(fc, "filter"))}
	var err error
	if q.Since, q.Until, err = timeRange(fc); err != nil {
		return c.queue(fc, queuePage{Dead: true}, statusOf(err), &notice{Text: refusal + webhookd.ErrorMessage(err)})
	}
	of := deadLettersOf(q)
	if fc.FormValue("confirm") != "yes" {
		n, err := c.countDeadLetters(ctx, q)
		if err != nil {
			return c.queue(fc, queuePage{Dead: true}, statusOf(err), &notice{Text: refusal + webhookd.ErrorMessage(err)})
		}
		if n == 0 {
			return c.queue(fc, queuePage{Dead: true}, fiber.StatusOK, &notice{Text: "There are no " + of + "."})
		}
		b := &bulkConfirm{Retry: retry, Since: form(fc, "since"), Until: form(fc, "until"), N: n, Of: of, After: afterBulk(retry)}
		return c.queue(fc, queuePage{Dead: true, Bulk: b}, fiber.StatusOK, nil)
	}
	repair := c.records.DiscardDeadLetters
	if retry {
		repair = c.records.RetryDeadLetters
	}
	var done storage.BulkResult
	pg := storage.Page{Limit: bulkBatch}
	for {
		res, err := repair(ctx, q, pg)
		done.Done += res.Done
		done.Refused += res.Refused
		if err != nil {
			return c.queue(fc, queuePage{Dead: true}, statusOf(err), &notice{Text: "Stopped: " + webhookd.ErrorMessage(err) + ". " + bulkDone(retry, of, done)})
		}
		if res.Next == "" {
			break
		}
		pg.Cursor = res.Next
	}
	status := fiber.StatusOK
	if retry {
		status = fiber.StatusAccepted
	}
	return c.queue(fc, queuePage{Dead: true}, status, &notice{OK: true, Text: bulkDone(retry, of, done)})
}

// afterBulk says what a bulk repair does.
func afterBulk(retry bool) string {
	if retry {
		return "Each goes back at the end of the outbox of its route with its attempts reset, oldest first, so that each resource's versions are sent in order. " +
			"One whose resource has had a newer version accepted since, or whose payload expired, is refused and stays a dead letter. " +
			"They are taken " + strconv.Itoa(bulkBatch) + " at a time."
	}
	return "Removes them: nothing more is sent to their routes. Their receipts stay, marked discarded there, and Redeliver on a receipt " +
		"can send its request again while its payload is held (receipt_ttl after it was last queued). They are taken " + strconv.Itoa(bulkBatch) + " at a time."
}

// bulkDone says what a bulk repair did.
func bulkDone(retry bool, of string, r storage.BulkResult) string {
	if retry {
		return "Retried the " + of + ": " + strconv.Itoa(r.Done) + " back in the outbox with their attempts reset, " +
			strconv.Itoa(r.Refused) + " refused (a newer version of their resource was accepted, or their payload expired), which stay."
	}
	return "Discarded the " + of + ": " + strconv.Itoa(r.Done) + " discarded, " + strconv.Itoa(r.Refused) + " refused, which stay."
}
