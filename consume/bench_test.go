package consume_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/webhookd/webhookd/consume"
	"github.com/webhookd/webhookd/versioning"
)

// BenchmarkHandlerOverhead compares, on PostgreSQL over loopback HTTP,
// the wrapper with a bare handler that runs the same apply in a
// transaction of its own and deduplicates nothing. Each iteration sends
// one request to each, in turn, so that the load of a shared machine
// falls on both alike; ns/bare and ns/wrapped are their mean times, and
// ratio is wrapped over bare: the target is at most 1.3.
func BenchmarkHandlerOverhead(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  consume.Config
	}{
		{"keys", consume.Config{}},
		{"keys+stale", consume.Config{Versions: versioning.Integer}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tdb := openDB(b, consume.PostgreSQL)
			bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				tx, err := tdb.db.BeginTx(r.Context(), nil)
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				defer tx.Rollback()
				if err := tdb.record(r.Context(), tx, consume.Delivery{Key: r.Header.Get("Idempotency-Key"), Body: body}); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				if err := tx.Commit(); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				io.WriteString(w, "applied\n")
			}))
			defer bare.Close()
			wrapped := httptest.NewServer(tdb.consumer(b, bc.cfg).Handler(tdb.record))
			defer wrapped.Close()
			var tookBare, tookWrapped time.Duration
			i := 0
			for b.Loop() {
				i++
				tookBare += timePost(b, bare.URL, i)
				tookWrapped += timePost(b, wrapped.URL, i)
			}
			b.ReportMetric(float64(tookBare.Nanoseconds())/float64(i), "ns/bare")
			b.ReportMetric(float64(tookWrapped.Nanoseconds())/float64(i), "ns/wrapped")
			b.ReportMetric(float64(tookWrapped)/float64(tookBare), "ratio")
		})
	}
}

// timePost sends delivery i as webhookd would and returns how long the
// answer took.
func timePost(b *testing.B, url string, i int) time.Duration {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"sku":"A","quantity":3}`))
	req.Header.Set("Idempotency-Key", fmt.Sprint("evt_", i))
	req.Header.Set("Webhook-Source", "shop")
	req.Header.Set("Webhook-Route", "default")
	req.Header.Set("Webhook-Attempt", "1")
	req.Header.Set("Webhook-Resource", fmt.Sprint("sku-", i%100))
	req.Header.Set("Webhook-Version", fmt.Sprint(i))
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("answered %d", resp.StatusCode)
	}
	return took
}
