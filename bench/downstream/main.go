// Command downstream is the bench's forward target: it answers 200 at once
// (keep-alive) and counts what webhookd forwards. GET /count answers
// {"requests": N, "distinct_keys": M}; M < N means some Idempotency-Keys
// arrived more than once (allowed: forwarding is at least once).
//
// POST /hold makes it hold every forwarded request unanswered until
// POST /release, so that the bench can build an outbox backlog and then
// time forwarding alone while it drains.
//
// With -order it also checks per-resource order: for each Webhook-Route
// and body data.id, data.version must never be lower than one already
// received. GET /count then adds "out_of_order" (lower than the highest
// received) and "repeats" (equal to it: a repeat, which at-least-once
// forwarding allows). Only those two fields of the body are parsed.
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
	"github.com/tidwall/gjson"
)

// orderCheck checks what the downstream receives; count adds its figures
// to GET /count's answer.
type orderCheck interface {
	receive(route string, body []byte)
	count(out fiber.Map)
}

// noOrderCheck is the check without -order: nothing is parsed or counted.
type noOrderCheck struct{}

func (noOrderCheck) receive(string, []byte) {}
func (noOrderCheck) count(fiber.Map)        {}

// order holds the highest version received per route and resource.
type order struct {
	mu         sync.Mutex
	latest     map[string]int64
	outOfOrder int64
	repeats    int64
}

func newOrder() *order { return &order{latest: make(map[string]int64)} }

func (o *order) receive(route string, body []byte) {
	fields := gjson.GetManyBytes(body, "data.id", "data.version")
	// A new string: fasthttp reuses the buffers of headers and body.
	key := route + "\x00" + fields[0].String()
	o.mu.Lock()
	o.observe(key, fields[1].Int())
	o.mu.Unlock()
}

// observe records version for key: a repeat if it equals the highest
// version key has received, out of order if it is lower.
func (o *order) observe(key string, version int64) {
	last, seen := o.latest[key]
	switch {
	case !seen || version > last:
		o.latest[key] = version
	case version == last:
		o.repeats++
	default:
		o.outOfOrder++
	}
}

func (o *order) count(out fiber.Map) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out["out_of_order"] = o.outOfOrder
	out["repeats"] = o.repeats
}

type counter struct {
	mu       sync.Mutex
	requests int64
	keys     map[string]struct{}
	order    orderCheck
	gate     chan struct{} // closed while requests pass
}

func (c *counter) receive(ctx *fiber.Ctx) error {
	c.mu.Lock()
	gate := c.gate
	c.mu.Unlock()
	<-gate
	c.order.receive(ctx.Get("Webhook-Route"), ctx.Body())
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
	out := fiber.Map{"requests": c.requests, "distinct_keys": len(c.keys)}
	c.mu.Unlock()
	c.order.count(out)
	return ctx.JSON(out)
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
	checkOrder := flag.Bool("order", false, "check per-resource order (Webhook-Route, data.id, data.version)")
	flag.Parse()
	c := &counter{keys: make(map[string]struct{}), order: noOrderCheck{}, gate: make(chan struct{})}
	if *checkOrder {
		c.order = newOrder()
	}
	close(c.gate)
	app := fiber.New(fiber.Config{DisableStartupMessage: true, BodyLimit: 16 << 20})
	app.Get("/count", c.count)
	app.Post("/hold", c.hold)
	app.Post("/release", c.release)
	app.Post("/*", c.receive)
	log.Fatal(app.Listen(*listen))
}
