// Command downstream is the bench's forward target: it answers 200 at once
// (keep-alive) and counts what webhookd forwards. GET /count answers
// {"requests": N, "distinct_keys": M}; M < N means some Idempotency-Keys
// arrived more than once (allowed: forwarding is at least once).
//
// POST /hold makes it hold every forwarded request unanswered until
// POST /release, so that the bench can build an outbox backlog and then
// time forwarding alone while it drains.
//
// It runs on Fiber, like the ceiling, because it shares the machine's
// cores with webhookd and wrk: a cheaper fixture leaves more of them to
// the gateway being measured.
package main

import (
	"flag"
	"log"
	"strings"
	"sync"

	"github.com/gofiber/fiber/v2"
)

type counter struct {
	mu       sync.Mutex
	requests int64
	keys     map[string]struct{}
	gate     chan struct{} // closed while requests pass
}

func (c *counter) receive(ctx *fiber.Ctx) error {
	c.mu.Lock()
	gate := c.gate
	c.mu.Unlock()
	<-gate
	key := ctx.Get("Idempotency-Key")
	c.mu.Lock()
	c.requests++
	if _, seen := c.keys[key]; !seen {
		c.keys[strings.Clone(key)] = struct{}{} // fasthttp reuses the header's buffer
	}
	c.mu.Unlock()
	return ctx.SendStatus(fiber.StatusOK)
}

func (c *counter) count(ctx *fiber.Ctx) error {
	c.mu.Lock()
	n, m := c.requests, len(c.keys)
	c.mu.Unlock()
	return ctx.JSON(fiber.Map{"requests": n, "distinct_keys": m})
}

func (c *counter) hold(ctx *fiber.Ctx) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.gate:
		c.gate = make(chan struct{})
	default: // already holding
	}
	return ctx.SendStatus(fiber.StatusNoContent)
}

func (c *counter) release(ctx *fiber.Ctx) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.gate: // not holding
	default:
		close(c.gate)
	}
	return ctx.SendStatus(fiber.StatusNoContent)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:18099", "address to listen on")
	flag.Parse()
	c := &counter{keys: make(map[string]struct{}), gate: make(chan struct{})}
	close(c.gate)
	app := fiber.New(fiber.Config{DisableStartupMessage: true, BodyLimit: 16 << 20})
	app.Get("/count", c.count)
	app.Post("/hold", c.hold)
	app.Post("/release", c.release)
	app.Post("/*", c.receive)
	log.Fatal(app.Listen(*listen))
}
