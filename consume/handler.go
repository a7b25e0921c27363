package consume

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"

	"github.com/webhookd/webhookd/signature"
)

// DecisionHeader carries the Decision of a delivery the handler answers
// 200.
const DecisionHeader = "Webhook-Decision"

// HTTPConsumer is the consumer name the handler records a forwarded
// request under: webhookd's request IDs are unique per source, and every
// route that selects a request sends the same key, each route's copy to be
// applied once.
func HTTPConsumer(source, route string) string {
	return source + "/" + route
}

// Handler wraps apply for requests that webhookd forwards. Per request:
// a bad signature (when Config.Secrets is set) is answered 401; a request
// without Idempotency-Key 400; then Apply runs under
// HTTPConsumer(Webhook-Source, Webhook-Route), and its decision is
// answered 200 with the Webhook-Decision header. An error from apply is
// answered 500, which webhookd retries, or 422 when it is Permanent, which
// webhookd dead-letters; a panic in apply is rolled back and answered 500.
func (c *Consumer) Handler(apply ApplyFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, c.maxBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				http.Error(w, fmt.Sprintf("body over %d bytes", c.maxBody), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if c.verify != nil {
			if err := c.verify.Verify(r.Header, body, c.now()); err != nil {
				var se *signature.Error
				reason := "signature refused"
				if errors.As(err, &se) {
					reason = string(se.Reason)
				}
				http.Error(w, reason, http.StatusUnauthorized)
				return
			}
		}
		d := Delivery{
			Key:      r.Header.Get("Idempotency-Key"),
			Source:   r.Header.Get("Webhook-Source"),
			Route:    r.Header.Get("Webhook-Route"),
			Resource: r.Header.Get("Webhook-Resource"),
			Version:  r.Header.Get("Webhook-Version"),
			Body:     body,
			Header:   r.Header,
		}
		if d.Key == "" {
			http.Error(w, "Idempotency-Key is required", http.StatusBadRequest)
			return
		}
		// The attempt is evidence only: a missing or odd one is recorded 0.
		d.Attempt, _ = strconv.Atoi(r.Header.Get("Webhook-Attempt"))
		decision, err := c.serve(r, d, apply)
		switch {
		case err == nil:
			w.Header().Set(DecisionHeader, string(decision))
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			io.WriteString(w, string(decision)+"\n")
		case IsPermanent(err):
			c.log.Warn("webhook refused for good", slog.String("key", d.Key), slog.String("source", d.Source), slog.String("route", d.Route), slog.Any("error", err))
			http.Error(w, "not applied, permanently: "+err.Error(), http.StatusUnprocessableEntity)
		default:
			c.log.Error("webhook not applied, to be retried", slog.String("key", d.Key), slog.String("source", d.Source), slog.String("route", d.Route), slog.Any("error", err))
			http.Error(w, "not applied, retry: "+err.Error(), http.StatusInternalServerError)
		}
	})
}

// serve runs Apply and turns a panic in apply, after Apply's rollback,
// into an error, so that the sender gets a 500 it retries.
func (c *Consumer) serve(r *http.Request, d Delivery, apply ApplyFunc) (decision Decision, err error) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			c.log.Error("panic applying a webhook, rolled back", slog.String("key", d.Key), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			decision, err = "", fmt.Errorf("panic: %v", p)
		}
	}()
	return c.Apply(r.Context(), HTTPConsumer(d.Source, d.Route), d, apply)
}
