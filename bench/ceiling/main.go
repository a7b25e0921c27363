// Command ceiling is the bench's bare Fiber endpoint: it reads the webhook
// body and answers 202, with none of webhookd's parsing, decision or
// durable commit. Its throughput under the same wrk load is the ceiling
// that webhookd's intake is compared with.
package main

import (
	"flag"
	"log"

	"github.com/gofiber/fiber/v2"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18090", "address to listen on")
	flag.Parse()
	app := fiber.New(fiber.Config{DisableStartupMessage: true, BodyLimit: 1 << 20})
	app.Post("/hooks/:source", func(c *fiber.Ctx) error {
		if len(c.Body()) == 0 {
			return c.Status(fiber.StatusBadRequest).JSON(fiber.Map{"error": "empty body"})
		}
		c.Set("Webhook-Decision", "accepted")
		return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"decision": "accepted", "source": c.Params("source")})
	})
	log.Fatal(app.Listen(*listen))
}
