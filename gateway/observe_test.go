package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/webhookd/webhookd"
)

// observed records what an Observer is told, one line an answer.
type observed struct {
	mu  sync.Mutex
	got []string
}

func (o *observed) Decided(d webhookd.Delivery, out webhookd.Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, strings.Join([]string{d.Source, d.RequestID, d.DeliveryID, string(out.Decision), out.LatestVersion}, " "))
}

func (o *observed) Rejected(source string, d webhookd.Delivery, reason, message string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, strings.Join([]string{source, d.RequestID, "rejected", reason, message}, " "))
}

func TestObserverIsToldOfEveryAnswer(t *testing.T) {
	f := newFixture(t, func(d Decider) Decider { return panicky{d} })
	o := &observed{}
	f.server.Observer = o
	f.post("billing", billing("req-1", "sub", 2), "X-Delivery-Id", "d1")
	f.post("billing", billing("req-1", "sub", 2), "X-Delivery-Id", "d2")
	f.post("billing", billing("req-2", "sub", 1))
	f.post("billing", `{"request_id": 7`)
	f.post("nosuch", `{}`)
	f.post("billing", billing("boom", "sub", 3))
	// Only a real listener refuses a body over max_body.
	f.server.publicAddr, f.server.adminAd = "127.0.0.1:0", "127.0.0.1:0"
	if err := f.server.Open(); err != nil {
		t.Fatal(err)
	}
	defer f.server.Shutdown(context.Background())
	resp, err := http.Post("http://"+f.server.PublicAddr()+"/hooks/billing", "application/json",
		strings.NewReader(`{"request_id":"big","pad":"`+strings.Repeat("x", 3000)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := []string{
		"billing req-1 d1 accepted 2",
		"billing req-1 d2 duplicate 2",
		"billing req-2  stale 2",
		"billing  rejected invalid body is not valid JSON",
		"unknown  rejected unknown_source unknown source \"nosuch\"",
		"billing  rejected internal internal error",
		"billing  rejected too_large body is 3029 bytes; source billing takes at most 2048",
	}
	if !slices.Equal(o.got, want) {
		t.Errorf("observed:\n%s\nwant:\n%s", strings.Join(o.got, "\n"), strings.Join(want, "\n"))
	}
}

func TestConsoleIsServedUnderUIWithoutTheAPIToken(t *testing.T) {
	f := newFixture(t, nil)
	admin := f.server.Admin()
	get := func(path string) *http.Response {
		t.Helper()
		resp, err := admin.Test(httptest.NewRequest(http.MethodGet, path, nil), -1)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := get("/"); resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /: %d to %q, want a redirect to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp := get("/ui/"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/ui/ of a gateway without a console: %d, want 404", resp.StatusCode)
	}
	var paths []string
	f.server.Console = func(c *fiber.Ctx) error {
		paths = append(paths, c.Path())
		return c.SendString("console")
	}
	for _, p := range []string{"/ui", "/ui/", "/ui/receipt"} {
		if resp := get(p); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d, want the console's answer", p, resp.StatusCode)
		}
	}
	if !slices.Equal(paths, []string{"/ui", "/ui/", "/ui/receipt"}) {
		t.Errorf("the console saw %v", paths)
	}
	if r := f.admin("/admin/outbox"); r.status != http.StatusOK {
		t.Errorf("the admin API behind the console's routes: %d", r.status)
	}
}
