package sender

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpproxy"
	xproxy "golang.org/x/net/proxy"
)

// maxAnswer bounds how much of a downstream's answer is read. Only its
// status and Retry-After matter; a longer answer still counts, and its
// connection is closed instead of reused.
const maxAnswer = 64 << 10

// maxAnswerHeader bounds an answer's header: fasthttp reads it whole into
// one buffer, 4 KiB by default, which a header with a few cookies outgrows.
const maxAnswerHeader = 64 << 10

// errClosing refuses new connections once Close has given up waiting.
var errClosing = errors.New("forwarder is closing")

// hostClient returns the connection pool for one route's downstream. Each
// route gets its own, sized to its concurrency, so that one source's
// connections never wait for another's. The proxy comes from HTTP_PROXY,
// HTTPS_PROXY and NO_PROXY, read as Go's own client reads them.
func (f *Forwarder) hostClient(r Route) (*fasthttp.HostClient, error) {
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("url %q: scheme must be http or https", r.URL)
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	dial, err := f.dialer(u, r.Timeout)
	if err != nil {
		return nil, err
	}
	return &fasthttp.HostClient{
		Addr:        net.JoinHostPort(u.Hostname(), port),
		IsTLS:       u.Scheme == "https",
		TLSConfig:   f.tlsConfig,
		DialTimeout: f.conns.track(dial),
		Name:        "webhookd",
		MaxConns:    max(r.Concurrency, 1),
		// A slot frees a moment after its answer is read; wait for it
		// rather than fail the attempt.
		MaxConnWaitTimeout:     r.Timeout,
		MaxResponseBodySize:    maxAnswer,
		ReadBufferSize:         maxAnswerHeader,
		DisablePathNormalizing: true,
		// One send per attempt: fasthttp would send again on a fresh
		// connection after an error, with the same Webhook-Attempt, to a
		// downstream that may have read and acted on the first. A kept-alive
		// connection the downstream dropped while idle costs an attempt,
		// which the retry policy repeats.
		MaxIdemponentCallAttempts: 1,
	}, nil
}

// dialer connects to u's host directly, or through the proxy the
// environment names for u. Every dial, a proxy's handshake included, is
// bounded by the request's time and by Close: a proxy that accepts and
// never answers would otherwise hold the attempt, or shutdown, for longer.
func (f *Forwarder) dialer(u *url.URL, timeout time.Duration) (fasthttp.DialFuncWithTimeout, error) {
	dial, err := dialThrough(u)
	if err != nil {
		return nil, err
	}
	return func(addr string, left time.Duration) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(f.ctx, dialTimeout(left, timeout))
		defer cancel()
		return dial(ctx, addr)
	}, nil
}

// dialTimeout is what fasthttp has left of the request's time, or the
// route's timeout where it passes none (0, as it does for a request that
// waited for a free connection).
func dialTimeout(left, route time.Duration) time.Duration {
	if left <= 0 {
		return route
	}
	return left
}

// dialThrough returns how to reach u's host: directly, or through the
// proxy the environment names for u.
func dialThrough(u *url.URL) (func(ctx context.Context, addr string) (net.Conn, error), error) {
	proxy, err := httpproxy.FromEnvironment().ProxyFunc()(u)
	if err != nil {
		return nil, fmt.Errorf("proxy for %s: %w", u.Redacted(), err)
	}
	if proxy == nil {
		var d net.Dialer
		return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }, nil
	}
	switch proxy.Scheme {
	case "http":
		return func(ctx context.Context, addr string) (net.Conn, error) { return connectThrough(ctx, proxy, addr) }, nil
	case "socks5", "socks5h":
		d, err := xproxy.FromURL(proxy, &net.Dialer{})
		if err != nil {
			return nil, fmt.Errorf("proxy %s for %s: %w", proxy.Redacted(), u.Redacted(), err)
		}
		socks := d.(xproxy.ContextDialer)
		return func(ctx context.Context, addr string) (net.Conn, error) { return socks.DialContext(ctx, "tcp", addr) }, nil
	}
	return nil, fmt.Errorf("proxy %s for %s: scheme %q is not supported (http, socks5)", proxy.Redacted(), u.Redacted(), proxy.Scheme)
}

// connectThrough opens a tunnel to addr through the HTTP proxy (CONNECT),
// within ctx.
func connectThrough(ctx context.Context, proxy *url.URL, addr string) (net.Conn, error) {
	host := proxy.Host
	if proxy.Port() == "" {
		host = net.JoinHostPort(proxy.Hostname(), "80")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", proxy.Redacted(), err)
	}
	// Reading the answer does not watch ctx: an expired deadline ends it.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{"User-Agent": {"webhookd"}}}
	if u := proxy.User; u != nil {
		password, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+password)))
	}
	br := bufio.NewReader(c)
	var resp *http.Response
	if err = req.Write(c); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() {
		err = context.Cause(ctx)
	}
	switch {
	case err != nil:
		c.Close()
		return nil, fmt.Errorf("proxy %s: CONNECT %s: %w", proxy.Redacted(), addr, err)
	case resp.StatusCode != http.StatusOK:
		c.Close()
		return nil, fmt.Errorf("proxy %s: CONNECT %s: %s", proxy.Redacted(), addr, resp.Status)
	case br.Buffered() > 0:
		// Bytes of the tunnel that came with the answer.
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// conns tracks the forwarder's open connections, because fasthttp cannot
// cancel a request: closing its connection is how Close abandons one.
type conns struct {
	mu     sync.Mutex
	open   map[*conn]struct{}
	closed bool
}

type conn struct {
	net.Conn
	owner *conns
	once  sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.open, c)
		c.owner.mu.Unlock()
	})
	return c.Conn.Close()
}

func (cs *conns) track(dial fasthttp.DialFuncWithTimeout) fasthttp.DialFuncWithTimeout {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		nc, err := dial(addr, timeout)
		if err != nil {
			return nil, err
		}
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cs.closed {
			nc.Close()
			return nil, errClosing
		}
		c := &conn{Conn: nc, owner: cs}
		if cs.open == nil {
			cs.open = make(map[*conn]struct{})
		}
		cs.open[c] = struct{}{}
		return c, nil
	}
}

// closeAll closes every connection, idle or busy, and refuses new ones.
func (cs *conns) closeAll() {
	cs.mu.Lock()
	cs.closed = true
	open := cs.open
	cs.open = nil
	cs.mu.Unlock()
	for c := range open {
		c.Conn.Close()
	}
}
