package console

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd"
)

// listed returns the request IDs a page's rows link to, in order.
func listed(a answer) []string {
	var ids []string
	for _, m := range regexp.MustCompile(`<a href="/ui/receipt\?source=\w+&amp;request_id=([\w-]+)" class="mono">`).FindAllStringSubmatch(a.body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// nextPage returns the address of a page's Next page link, "" when it has
// none.
func nextPage(a answer) string {
	m := regexp.MustCompile(`<a href="([^"]+)" class="button" rel="next">Next page</a>`).FindStringSubmatch(a.body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// pages follows the Next page links from path and returns the request IDs
// every page lists, in order.
func (f *fixture) pages(path string) (ids []string, pages int) {
	f.t.Helper()
	for path != "" {
		a := f.get(path)
		if a.status != http.StatusOK {
			f.t.Fatalf("%s: %d", path, a.status)
		}
		ids = append(ids, listed(a)...)
		pages++
		if pages > 20 {
			f.t.Fatalf("%s: more pages than there are receipts", path)
		}
		path = nextPage(a)
	}
	return ids, pages
}

func TestReceiptsAreSearchedAPageAtATime(t *testing.T) {
	f := newFixture(t, token)
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	decide := func(source, id, resource, version string, minute int, routes ...string) {
		f.decide(webhookd.Delivery{Source: source, RequestID: id, Resource: resource, Version: version, Fingerprint: "fp-" + id,
			ReceivedAt: base.Add(time.Duration(minute) * time.Minute), Forward: len(routes) > 0, Routes: routes, Body: []byte(`{}`)})
	}
	decide("billing", "r1", "sub_1", "2", 0, "crm", "warehouse")
	decide("billing", "r2", "sub_2", "1", 1, "crm", "warehouse")
	decide("billing", "r3", "sub_3", "1", 2, "warehouse")
	decide("audit", "a1", "", "", 3)
	decide("billing", "r4", "sub_1", "1", 4, "crm") // older than r1's version: stale
	decide("billing", "r5", "sub_5", "1", 5, "crm", "warehouse")

	all := f.get("/ui/receipts")
	if got, want := listed(all), []string{"r5", "r4", "a1", "r3", "r2", "r1"}; !slices.Equal(got, want) {
		t.Errorf("every receipt: %q, want %q, newest first", got, want)
	}
	contains(t, "every receipt", all, `<span class="badge stale">stale</span>`, `<span class="mono">crm</span> <span class="badge pending">pending</span>`,
		`<option value="audit">audit</option>`)
	if nextPage(all) != "" || strings.Contains(all.body, "First page") {
		t.Errorf("one page of receipts links to others:\n%s", all.body)
	}

	// Two a page: the pages together list each receipt once, in order, and
	// the links keep the search.
	ids, pages := f.pages("/ui/receipts?limit=2")
	if want := []string{"r5", "r4", "a1", "r3", "r2", "r1"}; !slices.Equal(ids, want) || pages < 3 {
		t.Errorf("two a page: %q in %d pages, want %q in 3 or more", ids, pages, want)
	}
	first := f.get("/ui/receipts?filter=billing&limit=2")
	next := nextPage(first)
	if q, _ := url.ParseQuery(strings.TrimPrefix(next, "/ui/receipts?")); q.Get("filter") != "billing" || q.Get("limit") != "2" || q.Get("cursor") == "" {
		t.Errorf("the next page's link %q does not keep the search", next)
	}
	contains(t, "a second page", f.get(next), `<a href="/ui/receipts?filter=billing&amp;limit=2" class="button">First page</a>`, `<input type="hidden" name="limit" value="2">`)

	for search, want := range map[string][]string{
		"filter=billing":                             {"r5", "r4", "r3", "r2", "r1"},
		"filter=audit":                               {"a1"},
		"filter=billing/crm":                         {"r5", "r2", "r1"},
		"filter=billing&decision=stale":              {"r4"},
		"decision=accepted&forward_state=pending":    {"r5", "r3", "r2", "r1"},
		"filter=billing/crm&forward_state=delivered": nil,
		"filter=billing&resource=sub_1":              {"r4", "r1"},
		"since=" + url.QueryEscape(base.Add(time.Minute).Format("2006-01-02T15:04:05")) + "&until=" + url.QueryEscape(base.Add(3*time.Minute).Format("2006-01-02T15:04")): {"r3", "r2"},
		"since=" + url.QueryEscape(base.Add(4*time.Minute).Format(time.RFC3339)):                                                                                          {"r5", "r4"},
	} {
		ids, _ := f.pages("/ui/receipts?" + search + "&limit=1")
		if !slices.Equal(ids, want) {
			t.Errorf("%s: %q, want %q", search, ids, want)
		}
	}
	contains(t, "a search that matches nothing", f.get("/ui/receipts?filter=billing/crm&forward_state=delivered"), "No receipt matches the search")

	for search, says := range map[string]string{
		"resource=sub_1":            "a resource is named within its source",
		"filter=billing&since=soon": `since &#34;soon&#34; is not a time`,
		"decision=duplicate":        `&#34;duplicate&#34; is not a decision`,
		"forward_state=lost":        `&#34;lost&#34; is not a forward state`,
		"limit=5000":                "is not a page size from 1 to 1000",
		"since=" + url.QueryEscape(base.Format(time.RFC3339)) + "&until=" + url.QueryEscape(base.Format(time.RFC3339)): "until must be after since",
		"cursor=garbage": "Not searched: ",
	} {
		a := f.get("/ui/receipts?" + search)
		if a.status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", search, a.status)
		}
		contains(t, search, a, `<p class="notice bad"`, says, `<form method="get" action="/ui/receipts"`)
	}
}

func TestTheQueuesAreShownAPageAtATime(t *testing.T) {
	f := newFixture(t, token)
	for _, id := range []string{"req-1", "req-2", "req-3"} {
		f.deliver("billing", id, "", "", "")
	}
	ids, pages := f.pages("/ui/outbox?filter=billing/crm&limit=2")
	if want := []string{"req-1", "req-2", "req-3"}; !slices.Equal(ids, want) || pages != 2 {
		t.Errorf("billing/crm's outbox, two a page: %q in %d pages, want %q in 2", ids, pages, want)
	}
	first := f.get("/ui/outbox?filter=billing&limit=2")
	contains(t, "the outbox's first page", first, `<span class="tag">6 in all</span>`)
	if len(listed(first)) != 2 || nextPage(first) == "" {
		t.Errorf("the outbox's first page, two a page: %q, next %q", listed(first), nextPage(first))
	}
	if a := f.get("/ui/outbox?limit=0"); a.status != http.StatusBadRequest {
		t.Errorf("a page size of 0: %d, want 400", a.status)
	}
}

func TestDeadLettersAreRepairedInBulkOnceConfirmed(t *testing.T) {
	f := newFixture(t, token)
	f.forwarding()
	ids := []string{"req-1", "req-2", "req-3"}
	for _, id := range ids {
		f.deliver("billing", id, "", "", "")
	}
	for _, id := range ids {
		f.waitForward(crm, id, webhookd.ForwardDead)
	}
	ctx := context.Background()

	// Paused, crm sends nothing, so that what a retry puts back stays in
	// its outbox.
	paused := f.post("/ui/routes/pause", "", url.Values{"source": {"billing"}, "route": {"crm"}})
	if paused.status != http.StatusOK {
		t.Fatalf("pause: %d %s", paused.status, paused.body)
	}
	contains(t, "pause", paused, "billing/crm is paused", `aria-label="Resume billing / crm"`, `<span class="badge paused">paused</span>`)
	if states, err := f.store.RouteStates(ctx); err != nil || !states[crm].Paused || states[warehouse].Paused {
		t.Fatalf("after the pause, the store holds %+v %v", states, err)
	}

	page := f.get("/ui/deadletters?filter=billing/crm&limit=2")
	contains(t, "the dead letters' first page", page, ">Retry all 3</button>", ">Discard all 3</button>", `<span class="tag">3 in all</span>`)
	if len(listed(page)) != 2 || nextPage(page) == "" {
		t.Errorf("two dead letters a page: %q, next %q", listed(page), nextPage(page))
	}

	bulk := func(action string, extra ...string) url.Values {
		form := url.Values{"filter": {"billing/crm"}, "repair": {action}}
		for i := 0; i < len(extra); i += 2 {
			form.Set(extra[i], extra[i+1])
		}
		return form
	}
	ask := f.post("/ui/deadletters/bulk", "", bulk("retry"))
	contains(t, "a bulk retry", ask, `role="alertdialog"`, "Retry all 3 dead letters of billing/crm?", `name="confirm" value="yes"`,
		`name="repair" value="retry"`, ">Retry all 3</button>", "oldest first")
	if dead := f.deadLetters(crm); len(dead) != 3 {
		t.Fatalf("a bulk retry retried before it was confirmed: %d dead letters left", len(dead))
	}
	done := f.post("/ui/deadletters/bulk", "", bulk("retry", "confirm", "yes"))
	if done.status != http.StatusAccepted {
		t.Errorf("the confirmed bulk retry: %d", done.status)
	}
	contains(t, "the confirmed bulk retry", done, "Retried the dead letters of billing/crm: 3 back in the outbox with their attempts reset, 0 refused")
	if dead := f.deadLetters(crm); len(dead) != 0 {
		t.Errorf("%d dead letters of crm left after the bulk retry", len(dead))
	}
	for _, id := range ids {
		if r, _ := f.store.Receipt(ctx, "billing", id); r.Route("crm").State != webhookd.ForwardPending {
			t.Errorf("%s on crm after the bulk retry: %+v", id, r.Route("crm"))
		}
	}

	resumed := f.post("/ui/routes/resume", "", url.Values{"source": {"billing"}, "route": {"crm"}})
	contains(t, "resume", resumed, "billing/crm is resumed", `aria-label="Pause billing / crm"`)
	if states, err := f.store.RouteStates(ctx); err != nil || states[crm].Paused {
		t.Fatalf("after the resume, the store holds %+v %v", states, err)
	}
	for _, id := range ids {
		f.waitForward(crm, id, webhookd.ForwardDead) // sent again, and refused again
	}

	when := func(d time.Duration) string { return time.Now().UTC().Add(d).Format("2006-01-02T15:04:05") }
	none := f.post("/ui/deadletters/bulk", "", bulk("discard", "since", when(time.Hour)))
	contains(t, "a bulk discard of none", none, "There are no dead letters of billing/crm that died since")
	if strings.Contains(none.body, "alertdialog") {
		t.Error("a bulk discard of no dead letter asks to confirm")
	}
	ranged := bulk("discard", "since", when(-time.Hour), "until", when(time.Hour))
	contains(t, "a bulk discard in a time range", f.post("/ui/deadletters/bulk", "", ranged),
		"Discard all 3 dead letters of billing/crm that died from", ">Discard all 3</button>", "Their receipts stay, marked discarded")
	ranged.Set("confirm", "yes")
	contains(t, "the confirmed bulk discard", f.post("/ui/deadletters/bulk", "", ranged), "Discarded the dead letters of billing/crm", ": 3 discarded, 0 refused")
	for _, id := range ids {
		if r, _ := f.store.Receipt(ctx, "billing", id); r.Route("crm").State != webhookd.ForwardDiscarded || r.Route("warehouse").State != webhookd.ForwardDelivered {
			t.Errorf("%s after the bulk discard: %+v", id, r.Routes)
		}
	}
	contains(t, "no dead letters left", f.get("/ui/deadletters?filter=billing/crm"), "No dead letters for billing/crm")
	contains(t, "a bulk retry of a source", f.post("/ui/deadletters/bulk", "", url.Values{"filter": {"billing"}, "repair": {"retry"}}),
		"There are no dead letters of billing.")
	contains(t, "a bulk retry of every source", f.post("/ui/deadletters/bulk", "", url.Values{"repair": {"retry"}}),
		"There are no dead letters of every source.")

	for name, tc := range map[string]struct {
		path   string
		form   url.Values
		status int
		says   string
	}{
		"an unknown action":       {"/ui/deadletters/bulk", bulk("redo"), http.StatusBadRequest, "a bulk repair is retry or discard"},
		"a bad time":              {"/ui/deadletters/bulk", bulk("retry", "until", "tomorrow"), http.StatusBadRequest, "Not retried: until &#34;tomorrow&#34; is not a time"},
		"an unconfigured route":   {"/ui/routes/pause", url.Values{"source": {"billing"}, "route": {"nosuch"}}, http.StatusNotFound, "Not paused: no route nosuch of source billing is configured"},
		"a source without routes": {"/ui/routes/resume", url.Values{"source": {"audit"}, "route": {"default"}}, http.StatusNotFound, "Not resumed: no route default of source audit"},
	} {
		a := f.post(tc.path, "", tc.form)
		if a.status != tc.status {
			t.Errorf("%s: %d, want %d", name, a.status, tc.status)
		}
		contains(t, name, a, tc.says)
	}
}

func TestParseWhen(t *testing.T) {
	want := time.Date(2026, 12, 2, 14, 30, 0, 0, time.UTC)
	for _, v := range []string{"2026-12-02T14:30", "2026-12-02T14:30:00", "2026-12-02T14:30:00Z", "2026-12-02T15:30:00+01:00"} {
		if got, err := parseWhen("since", v); err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("parseWhen(%q) = %v, %v, want %v", v, got, err, want)
		}
	}
	if got, err := parseWhen("since", ""); err != nil || !got.IsZero() {
		t.Errorf("no time: %v %v", got, err)
	}
	if _, err := parseWhen("since", "14:30"); webhookd.ErrorCode(err) != webhookd.EINVALID {
		t.Errorf("a time without a date: %v, want EINVALID", err)
	}
}
