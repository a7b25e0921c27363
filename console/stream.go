package console

import (
	"bufio"
	"encoding/json"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/webhookd/webhookd"
)

const (
	// keepalive is how often an idle stream writes a comment: a browser
	// that left is noticed on the next write.
	keepalive = 15 * time.Second
	// writeWait bounds each write to a stream: a browser that stops
	// reading loses its stream rather than holding it open.
	writeWait = 10 * time.Second
	// reconnect is the delay, in ms, a browser waits before it opens a
	// stream that ended again, with Last-Event-ID set to the last event it
	// saw.
	reconnect = 1000
)

// handleEvents streams the live tail as server-sent events. It starts
// after the event the browser saw last (Last-Event-ID on a reconnect, or
// the page's ?after=), from the ring, and goes on with each new one.
func (c *Console) handleEvents(fc *fiber.Ctx) error {
	f := filter{source: form(fc, "source"), decision: form(fc, "decision")}
	last := fc.Get("Last-Event-ID")
	if last == "" {
		last = fc.Query("after")
	}
	after, _ := strconv.ParseUint(last, 10, 64)
	sub, backlog := c.subscribe(f, after)
	if sub == nil {
		return webhookd.Errorf(webhookd.EUNAVAILABLE, "%d live tails are open already: close one", maxSubscribers)
	}
	fc.Set(fiber.HeaderContentType, "text/event-stream")
	fc.Set("X-Accel-Buffering", "no") // a proxy in front must not hold events back
	rc := fc.Context()
	closing := c.closing
	rc.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer c.unsubscribe(sub)
		tick := time.NewTicker(keepalive)
		defer tick.Stop()
		flush := func() bool {
			rc.SetWriteDeadline(time.Now().Add(writeWait))
			return w.Flush() == nil
		}
		w.WriteString("retry: " + strconv.Itoa(reconnect) + "\n\n")
		for i := range backlog {
			writeEvent(w, &backlog[i])
		}
		if !flush() {
			return
		}
		for {
			select {
			case e := <-sub.events:
				writeEvent(w, &e)
				for n := len(sub.events); n > 0; n-- {
					e := <-sub.events
					writeEvent(w, &e)
				}
			case <-tick.C:
				w.WriteString(": keepalive\n\n")
			case <-closing:
				return
			}
			// A stream that fell behind ends once it has written what was
			// queued; the browser comes back for the rest.
			if !flush() || (sub.lagged.Load() && len(sub.events) == 0) {
				return
			}
		}
	})
	return nil
}

func writeEvent(w *bufio.Writer, e *Event) {
	b, _ := json.Marshal(e) // an Event is strings, numbers and a time
	w.WriteString("id: " + strconv.FormatUint(e.Seq, 10) + "\nevent: answer\ndata: ")
	w.Write(b)
	w.WriteString("\n\n")
}
