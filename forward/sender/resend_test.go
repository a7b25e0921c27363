package sender_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
)

// A downstream that reads the whole request on a fresh connection, then
// resets it, may have acted on it: each send is an attempt webhookd
// counts, with its own Webhook-Attempt, never a repeat fasthttp makes on
// its own. (Only a reused connection closed before any byte of the answer
// is sent on again within the attempt: see
// TestIdleConnectionTheDownstreamClosedCostsNoAttempt.)
func TestEverySendIsACountedAttempt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var attempts []string
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					mu.Lock()
					attempts = append(attempts, req.Header.Get("Webhook-Attempt"))
					n := len(attempts)
					mu.Unlock()
					if n <= 2 {
						c.(*net.TCPConn).SetLinger(0) // close with a reset
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
				}
			}()
		}
	}()
	s := openStore(t, t.TempDir())
	start(t, s, map[forward.Target]sender.Route{target("billing"): route("http://" + ln.Addr().String())})
	acceptRaw(t, s, "req-1", "application/json", "{}")
	eventually(t, "delivered", delivered(t, s, "req-1"))
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"1", "2", "3"}; !slices.Equal(attempts, want) {
		t.Errorf("Webhook-Attempt of each request received: %v, want %v", attempts, want)
	}
	if f := status(t, s, "billing", "req-1"); f.Attempts != len(attempts) {
		t.Errorf("forward status = %+v, want %d attempts, one per request received", f, len(attempts))
	}
}
