// Command loadgen sends webhooks at a fixed rate (open loop), for the
// bench's soak mode: wrk only knows "as fast as possible". Bodies have the
// shape of bench/webhook.lua's accept mode: 1024 bytes, random hex padding,
// new request IDs, versions growing per resource.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:18080/hooks/bench", "where to POST")
	rate := flag.Float64("rate", 1000, "requests per second")
	duration := flag.Duration("duration", time.Minute, "how long to send")
	conns := flag.Int("conns", 64, "connections (requests in flight at most)")
	prefix := flag.String("prefix", "s", "request ID prefix; use a new one per run")
	flag.Parse()
	if !strings.HasPrefix(*url, "http://127.0.0.1:") {
		fmt.Fprintln(os.Stderr, "loadgen: only http://127.0.0.1 targets")
		os.Exit(2)
	}

	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: *conns, MaxConnsPerHost: *conns},
		Timeout:   30 * time.Second,
	}
	// Random hex padding, as in webhook.lua, so bodies do not compress.
	hex := make([]byte, 64<<10)
	for i := range hex {
		hex[i] = "0123456789abcdef"[rand.IntN(16)]
	}
	pad := string(hex)
	// A resource comes back every ten seconds of the schedule at the least,
	// so a request held up on its way is not overtaken by the resource's
	// next version, which would decide it stale.
	resources := max(1000, int(*rate*10))
	// Up to a second of requests may queue behind busy connections, so a
	// stall is caught up afterwards instead of lowering the rate.
	jobs := make(chan int, max(*conns, int(*rate)))
	// A request's latency runs from the moment it was due (the schedule
	// releases requests every millisecond), not from when a connection was
	// free to send it: a stalled server holds up the requests queued behind
	// it too, and timing from the send would hide that.
	start := time.Now()
	// Requests still in flight ten seconds past the end are abandoned.
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(*duration+10*time.Second))
	defer cancel()
	due := func(i int) time.Time { return start.Add(time.Duration(float64(i) / *rate * float64(time.Second))) }
	var ok2xx, other, failed, unsent atomic.Int64
	var ended atomic.Bool
	latencies := make([][]time.Duration, *conns)
	var wg sync.WaitGroup
	for w := range *conns {
		wg.Go(func() {
			for i := range jobs {
				if ended.Load() {
					unsent.Add(1)
					continue
				}
				head := fmt.Sprintf(`{"request_id":"%s-%d","sent_at":"2026-01-01T00:00:00Z","type":"subscription.updated","data":{"id":"%s-r-%d","version":%d,"note":"`,
					*prefix, i, *prefix, i%resources, i)
				at := i * 7919 % (len(pad) - 1024)
				body := head + pad[at:at+1024-len(head)-3] + `"}}`
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, *url, strings.NewReader(body))
				if err != nil {
					panic(err) // a fixed URL and method: cannot fail
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				// A failed request counts too, for as long as it took.
				latencies[w] = append(latencies[w], time.Since(due(i)))
				if err != nil {
					failed.Add(1)
					continue
				}
				if resp.StatusCode/100 == 2 {
					ok2xx.Add(1)
				} else {
					other.Add(1)
				}
			}
		})
	}

	// Release requests on schedule; "behind" counts the requests the
	// schedule had to wait for because the queue (a second of requests)
	// was full.
	// Nothing is released after the end, and what is still queued then is
	// dropped (counted as unsent): a stalled server must not hold the run
	// for the requests it fell behind by.
	end := time.NewTimer(*duration)
	sent, behind := 0, 0
release:
	for time.Since(start) < *duration {
		for due := int(time.Since(start).Seconds() * *rate); sent < due; sent++ {
			select {
			case jobs <- sent + 1:
				continue
			default:
				behind++
			}
			select {
			case jobs <- sent + 1:
			case <-end.C:
				break release
			}
		}
		time.Sleep(time.Millisecond)
	}
	ended.Store(true)
	close(jobs)
	wg.Wait()
	took := time.Since(start)

	var all []time.Duration
	for _, l := range latencies {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))]
	}
	fmt.Printf("LOADGEN target_rate=%.0f scheduled=%d done=%d unsent=%d achieved_rate=%.0f 2xx=%d non2xx=%d errors=%d behind=%d p50=%v p99=%v p99.9=%v max=%v (from each request's due time)\n",
		*rate, sent, len(all), unsent.Load(), float64(len(all))/took.Seconds(), ok2xx.Load(), other.Load(), failed.Load(), behind,
		pct(0.50), pct(0.99), pct(0.999), pct(1))
}
