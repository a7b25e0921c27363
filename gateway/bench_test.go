package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/webhookd/webhookd/configs"
	"github.com/webhookd/webhookd/store"
)

// BenchmarkDelivery measures one webhook delivery end to end over loopback:
// HTTP, parsing, JSON field extraction, the durable decision and the answer.
func BenchmarkDelivery(b *testing.B) {
	cfg, err := configs.Parse([]byte(testConfig))
	if err != nil {
		b.Fatal(err)
	}
	cfg.Listen, cfg.Admin.Listen, cfg.MaxBody = "127.0.0.1:0", "127.0.0.1:0", 1<<20
	st := store.New(b.TempDir())
	if err := st.Open(); err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	srv, err := NewServer(cfg, st, st, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Open(); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	url := "http://" + srv.PublicAddr() + "/hooks/billing"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections() // before Shutdown, which waits for open connections
	pad := strings.Repeat("x", 900)     // about 1 KB bodies
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			body := fmt.Sprintf(`{"request_id":"req-%d","pad":%q,"data":{"object":{"id":"res-%d","version":%d}}}`, i, pad, i%1000, i)
			resp, err := client.Post(url, "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 202 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer() // the deferred shutdown is not part of a delivery
}

// BenchmarkParse measures the request path before the store: JSON
// validation, field extraction with gjson, identifier checks, version
// parsing and the fingerprint with an excluded field, on a 1 KB body.
func BenchmarkParse(b *testing.B) {
	f := newFixtureFor(b, testConfig, nil)
	src := f.server.sources["billing"]
	body := []byte(fmt.Sprintf(`{"request_id":"req-1","sent_at":"now","pad":%q,"data":{"object":{"id":"res-1","version":7}}}`, strings.Repeat("x", 900)))
	app := f.server.Public()
	c := app.AcquireCtx(&fasthttp.RequestCtx{})
	defer app.ReleaseCtx(c)
	c.Request().SetBody(body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := f.server.authenticate(c, src); err != nil {
			b.Fatal(err)
		}
		if _, err := f.server.parse(c, src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseRoutes is BenchmarkParse for a source with three routes,
// two of them filtered (one on the body, one on a header) and both
// matching: what choosing a delivery's routes adds to the request path.
func BenchmarkParseRoutes(b *testing.B) {
	f := newFixtureFor(b, routesConfig, nil)
	src := f.server.sources["stripe"]
	body := []byte(fmt.Sprintf(`{"id":"evt_1","type":"invoice.paid","pad":%q,"data":{"object":{"id":"in_1"}}}`, strings.Repeat("x", 900)))
	app := f.server.Public()
	c := app.AcquireCtx(&fasthttp.RequestCtx{})
	defer app.ReleaseCtx(c)
	c.Request().SetBody(body)
	c.Request().Header.Set("X-Account", "acct_1")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		d, err := f.server.parse(c, src)
		if err != nil {
			b.Fatal(err)
		}
		if len(d.Routes) != 3 {
			b.Fatalf("routes %v, want all three", d.Routes)
		}
	}
}
