package main

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// receiptPage is one page of a receipts search: each item's request ID
// and first-seen time, and the next cursor.
func (c *client) receiptPage(query, cursor string) (ids []string, seen []time.Time, next string) {
	c.t.Helper()
	status, body := c.adminCall(http.MethodGet, "/admin/receipts?"+query+"&cursor="+url.QueryEscape(cursor))
	if status != 200 {
		c.t.Fatalf("search %s: %d %v", query, status, body)
	}
	items, _ := body["items"].([]any)
	for _, it := range items {
		m := it.(map[string]any)
		ids = append(ids, m["request_id"].(string))
		at, err := time.Parse(time.RFC3339Nano, m["first_seen"].(string))
		if err != nil {
			c.t.Fatalf("first_seen of %v: %v", m, err)
		}
		seen = append(seen, at)
	}
	next, _ = body["next_cursor"].(string)
	return ids, seen, next
}

// The receipts search, through either replica's admin API, finds what
// both replicas decided: by decision, resource, route and forward state,
// and time, newest first, a bounded page at a time; receipts that arrive
// while an operator pages do not make a page repeat or skip one.
func TestSearchAcrossReplicas(t *testing.T) {
	const resources, perResource = 10, 30
	down, srv := newDownstream(t, 200)
	routes := `      - name: erp
        url: %s/erp
`
	storage := pgStorage(t)
	reps := startReplicas(t, 2, func(public, admin string) string {
		return protectConfig(storage, public, admin, srv.URL, routes)
	})
	a, b := reps[0].c, reps[1].c
	total := postAll(t, reps, "orders", resources, perResource)
	beforeStale := time.Now()
	var stale []string
	for r := range resources {
		id := fmt.Sprintf("late-r%d", r)
		status, body := reps[r%2].c.post("orders", fmt.Sprintf(`{"id":%q,"order":"r%d","seq":1}`, id, r))
		if status != 200 || body["decision"] != "stale" {
			t.Fatalf("post %s: %d %v, want stale", id, status, body)
		}
		stale = append(stale, id)
	}
	waitLong(t, "every accepted request delivered", func() bool { return down.delivered("/erp") == total })

	// Every receipt once, newest first, in pages of at most 40, while
	// new ones, of another source, arrive between pages.
	var ids []string
	var last time.Time
	cursor, pages := "", 0
	for {
		page, seen, next := b.receiptPage("limit=40", cursor)
		if len(page) > 40 {
			t.Fatalf("a page of %d, over the limit", len(page))
		}
		for i, at := range seen {
			if !last.IsZero() && at.After(last) {
				t.Errorf("%s (first seen %v) comes after a receipt first seen %v", page[i], at, last)
			}
			last = at
		}
		ids = append(ids, page...)
		status, body := a.post("events", fmt.Sprintf(`{"id":"new-%d","order":"n%d"}`, pages, pages))
		if status != 202 {
			t.Fatalf("post new-%d: %d %v", pages, status, body)
		}
		pages++
		if cursor = next; cursor == "" {
			break
		}
	}
	slices.Sort(ids)
	if len(ids) != total+len(stale) || len(slices.Compact(ids)) != len(ids) {
		t.Errorf("paged %d receipts (%d distinct), want the %d there were when paging began", len(ids), len(slices.Compact(ids)), total+len(stale))
	}
	for _, id := range ids {
		if strings.HasPrefix(id, "new-") {
			t.Errorf("%s, which arrived after the first page, was paged", id)
		}
	}

	for _, tc := range []struct {
		query string
		want  int
	}{
		{"source=orders&decision=stale", len(stale)},
		{"source=orders&decision=accepted&resource=r3", perResource},
		{"source=orders&resource=r3", perResource + 1},
		{"source=orders&route=erp&forward_state=delivered", total},
		{"source=orders&route=erp&forward_state=pending&until=" + url.QueryEscape(beforeStale.UTC().Format(time.RFC3339Nano)), 0},
		{"source=orders&since=" + url.QueryEscape(beforeStale.UTC().Format(time.RFC3339Nano)) + "&decision=stale", len(stale)},
		{"source=orders&until=" + url.QueryEscape(beforeStale.UTC().Format(time.RFC3339Nano)), total},
	} {
		for _, c := range []*client{a, b} {
			if got := c.search("/admin/receipts?" + tc.query + "&limit=100"); len(got) != tc.want {
				t.Errorf("%s through %s: %d receipts, want %d", tc.query, c.admin, len(got), tc.want)
			}
		}
	}
	got := a.search("/admin/receipts?source=orders&decision=stale")
	slices.Sort(got)
	if !slices.Equal(got, stale) {
		t.Errorf("stale receipts %v, want %v", got, stale)
	}
	// A resource's receipts, newest first: its versions from the last.
	r3, _, _ := b.receiptPage("source=orders&resource=r3&decision=accepted&limit=3", "")
	if want := []string{"orders-r3-30", "orders-r3-29", "orders-r3-28"}; !slices.Equal(r3, want) {
		t.Errorf("r3's newest receipts %v, want %v", r3, want)
	}
}
