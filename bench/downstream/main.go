// Command downstream is the bench's forward target: it answers 200 at once
// (keep-alive) and counts what webhookd forwards. GET /count answers
// {"requests": N, "distinct_keys": M}; M < N means some Idempotency-Keys
// arrived more than once (allowed: forwarding is at least once).
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"sync"
	"time"
)

type counter struct {
	mu       sync.Mutex
	requests int64
	keys     map[string]struct{}
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	c.mu.Lock()
	c.requests++
	c.keys[key] = struct{}{}
	c.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (c *counter) count(w http.ResponseWriter, _ *http.Request) {
	c.mu.Lock()
	n, m := c.requests, len(c.keys)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]int64{"requests": n, "distinct_keys": int64(m)})
}

func main() {
	listen := flag.String("listen", "127.0.0.1:18099", "address to listen on")
	flag.Parse()
	c := &counter{keys: make(map[string]struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /count", c.count)
	mux.Handle("/", c)
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Fatal(srv.ListenAndServe())
}
