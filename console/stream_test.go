package console

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd"
)

func decided(a *activity, source, requestID string, d webhookd.Decision) {
	a.Decided(webhookd.Delivery{Source: source, RequestID: requestID}, webhookd.Outcome{Decision: d})
}

func TestTellingTheConsoleNeverWaitsForAReader(t *testing.T) {
	a := newActivity([]string{"billing"}, time.Now)
	slow, _ := a.subscribe(filter{}, 0)
	picky, _ := a.subscribe(filter{source: "billing", decision: "stale"}, 0)
	done := make(chan struct{})
	go func() {
		// Far more than any queue holds, with nobody reading.
		for i := range 10 * subscriberBuf {
			decided(a, "billing", strconv.Itoa(i), webhookd.Accepted)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a stream that does not read held up the intake path")
	}
	if !slow.lagged.Load() || len(slow.events) != subscriberBuf {
		t.Errorf("the stream that fell behind: lagged %v with %d queued, want it marked after %d", slow.lagged.Load(), len(slow.events), subscriberBuf)
	}
	if picky.lagged.Load() || len(picky.events) != 0 {
		t.Errorf("a stream got events its filter does not match: %d", len(picky.events))
	}
	// What it missed is held in the ring, for the reconnect.
	got := a.recentLocked(filter{}, uint64(10*subscriberBuf-tailSize), tailSize)
	if len(got) != tailSize || got[0].RequestID != strconv.Itoa(10*subscriberBuf-tailSize) {
		t.Errorf("the ring holds %d, from %q", len(got), got[0].RequestID)
	}
	if got := a.recentLocked(filter{}, 1<<40, 3); len(got) != 3 || got[2].Seq != a.seq {
		t.Errorf("a Last-Event-ID from before a restart gets %v, want the latest held", got)
	}
	for range maxSubscribers - 2 {
		if s, _ := a.subscribe(filter{}, 0); s == nil {
			t.Fatal("refused a stream below the limit")
		}
	}
	if s, _ := a.subscribe(filter{}, 0); s != nil {
		t.Errorf("opened a stream past the limit of %d", maxSubscribers)
	}
	a.unsubscribe(slow)
	if s, _ := a.subscribe(filter{}, 0); s == nil {
		t.Error("a closed stream's place was not freed")
	}
}

// serve runs the console on a loopback listener, as the admin listener
// does, and stops it at the test's end.
func serve(t *testing.T, c *Console) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.All("/ui/*", c.Handle)
	go app.Listener(ln)
	t.Cleanup(func() {
		c.Close()
		app.ShutdownWithTimeout(5 * time.Second)
	})
	return "http://" + ln.Addr().String()
}

// stream reads server-sent events.
type stream struct {
	t    *testing.T
	resp *http.Response
	r    *bufio.Reader
}

func openStream(t *testing.T, url string, header ...string) *stream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &stream{t: t, resp: resp, r: bufio.NewReader(resp.Body)}
}

// next returns the next event's id and payload.
func (s *stream) next() (string, Event) {
	s.t.Helper()
	var id string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			s.t.Fatalf("stream ended: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "data: "):
			var e Event
			if err := json.Unmarshal([]byte(line[6:]), &e); err != nil {
				s.t.Fatal(err)
			}
			return id, e
		}
	}
}

func TestLiveTailStreamsDecisionsAndCatchesUp(t *testing.T) {
	c := newConsole(token, sources, time.Hour, nil, zaptest.NewLogger(t), time.Now)
	base := serve(t, c)
	decided(c.activity, "billing", "before", webhookd.Accepted)
	decided(c.activity, "audit", "other source", webhookd.Accepted)

	s := openStream(t, base+"/ui/tail/events?source=billing&after=0")
	if id, e := s.next(); id != "1" || e.RequestID != "before" || !e.Receipt {
		t.Errorf("first event %s %+v, want the held one, with a receipt", id, e)
	}
	c.Rejected("billing", webhookd.Delivery{RequestID: "refused"}, "signature", "signature mismatch")
	decided(c.activity, "billing", "dup", webhookd.Duplicate)
	if _, e := s.next(); e.Decision != "rejected" || e.Reason != "signature" || e.Message != "signature mismatch" || e.RequestID != "refused" || e.Receipt {
		t.Errorf("live event %+v, want a refusal without a receipt", e)
	}
	if id, e := s.next(); id != "4" || e.RequestID != "dup" || !e.Receipt {
		t.Errorf("live event %s %+v", id, e)
	}

	// A browser that reconnects names the last event it saw.
	again := openStream(t, base+"/ui/tail/events?decision=accepted&after=0", "Last-Event-ID", "1")
	if id, e := again.next(); id != "2" || e.RequestID != "other source" {
		t.Errorf("after a reconnect: %s %+v, want event 2", id, e)
	}

	done := make(chan struct{})
	go func() {
		s.r.ReadString(0) // to the end of the stream
		close(done)
	}()
	c.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close left a stream open")
	}
}

func TestLiveTailRefusesPastItsLimit(t *testing.T) {
	c := newConsole(token, sources, time.Hour, nil, zaptest.NewLogger(t), time.Now)
	for range maxSubscribers {
		c.subscribe(filter{}, 0)
	}
	base := serve(t, c)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/ui/tail/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a live tail past the limit: %d, want 503", resp.StatusCode)
	}
}
