package sender

import (
	"bufio"
	"context"
	"crypto/tls"
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

// maxAnswer bounds how much of a downstream's answer is read. Its status
// and Retry-After are what count, and the start of its body goes into the
// error of a failed attempt; a longer answer still counts, and its
// connection is closed instead of reused.
const maxAnswer = 64 << 10

// idleTimeout is how long a kept-alive connection may wait for its next
// request. Servers close idle connections too, Node's (under Express) and
// Apache's after 5 s by default, and a request sent as the server closes
// its connection is lost: webhookd closes its own first. Servers that
// close sooner (Gunicorn, after 2 s) are left to post's resend.
const idleTimeout = 4 * time.Second

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
	dial, err := f.dialer(u, r.Timeout, r.TLS)
	if err != nil {
		return nil, err
	}
	return &fasthttp.HostClient{
		Addr:        net.JoinHostPort(u.Hostname(), port),
		IsTLS:       u.Scheme == "https",
		DialTimeout: f.conns.track(dial),
		Name:        "webhookd",
		MaxConns:    max(r.Concurrency, 1),
		// A slot frees a moment after its answer is read; wait for it
		// rather than fail the attempt.
		MaxConnWaitTimeout:     r.Timeout,
		MaxIdleConnDuration:    idleTimeout,
		MaxResponseBodySize:    maxAnswer,
		ReadBufferSize:         maxAnswerHeader,
		DisablePathNormalizing: true,
		// fasthttp would send again after any error, on any connection,
		// to a downstream that may have read and acted on the first send.
		// post sends again itself, only when a reused connection was
		// closed before any byte of the answer.
		MaxIdemponentCallAttempts: 1,
	}, nil
}

// dialer connects to u's host directly, or through the proxy the
// environment names for u, and shakes hands over TLS for https. Every
// dial, the handshakes included, is bounded by the request's time and by
// Close: a proxy or a server that accepts and never answers would
// otherwise hold the attempt, or shutdown, for longer.
func (f *Forwarder) dialer(u *url.URL, timeout time.Duration, rt *RouteTLS) (fasthttp.DialFuncWithTimeout, error) {
	dial, err := dialThrough(u)
	if err != nil {
		return nil, err
	}
	var tlsConfig func() *tls.Config
	if u.Scheme == "https" {
		if tlsConfig, err = f.clientTLS(u, rt); err != nil {
			return nil, err
		}
	}
	return func(addr string, left time.Duration) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(f.ctx, dialTimeout(left, timeout))
		defer cancel()
		nc, err := dial(ctx, addr)
		if err != nil || tlsConfig == nil {
			return nc, err
		}
		c := tlsConfig()
		tc := tls.Client(nc, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake with %s (%s): %w", addr, c.ServerName, err)
		}
		return tc, nil
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

// conn is one connection to a downstream, as fasthttp writes requests to
// it and reads answers from it (TLS included), tracked by its conns. It
// also follows the exchange on it, for post to tell a request lost to a
// connection the downstream closed while it was idle.
type conn struct {
	net.Conn          // the HTTP stream: the connection dialed, or TLS over it
	raw      net.Conn // the connection dialed, which closeAll closes
	local    *connAddr
	owner    *conns
	once     sync.Once

	// fasthttp uses a connection for one request at a time: it writes the
	// request, then reads the answer, on the goroutine that sends it.
	writing  bool // the last call was a Write: a request is being sent
	reused   bool // an answer to an earlier request was read on this connection
	answered bool // a byte of the current request's answer was read
	idleLost bool // the current request failed on a reused connection before any byte of its answer
	// alert is the TLS alert the downstream ended the current request
	// with: under TLS 1.3 a downstream checks the client certificate
	// after the handshake, and its refusal comes on the first read, which
	// fasthttp reports as a connection closed.
	alert error
}

func (c *conn) Write(p []byte) (int, error) {
	if !c.writing {
		c.writing, c.reused, c.answered, c.idleLost, c.alert = true, c.reused || c.answered, false, false, nil
	}
	n, err := c.Conn.Write(p)
	c.fail(err)
	return n, err
}

func (c *conn) Read(p []byte) (int, error) {
	c.writing = false
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.answered = true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		c.alert = err
	}
	c.fail(err)
	return n, err
}

// fail notes err, when it ends a request on a reused connection before
// any byte of its answer: the downstream closed the connection while it
// was idle, as the request went out or before. fasthttp reports both as
// any other failure (the first as ErrConnectionClosed). A timeout is not
// a close.
func (c *conn) fail(err error) {
	var ne net.Error
	if err != nil && c.reused && !c.answered && !(errors.As(err, &ne) && ne.Timeout()) {
		c.idleLost = true
	}
}

// LocalAddr carries the connection, so that a fasthttp Response, which
// keeps the local address of the connection its request went out on,
// leads post to it: see idleLost.
func (c *conn) LocalAddr() net.Addr { return c.local }

type connAddr struct {
	net.Addr
	conn *conn
}

// idleLost says whether the request answered in resp failed on a reused
// connection the downstream had closed while it was idle.
func idleLost(resp *fasthttp.Response) bool {
	a, ok := resp.LocalAddr().(*connAddr)
	return ok && a.conn.idleLost
}

// refusal is err, or the TLS alert the downstream ended the request
// answered in resp with, which says why.
func refusal(resp *fasthttp.Response, err error) error {
	if a, ok := resp.LocalAddr().(*connAddr); ok && a.conn.alert != nil {
		return fmt.Errorf("the downstream refused the TLS connection: %w", a.conn.alert)
	}
	return err
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.open, c)
		c.owner.mu.Unlock()
	})
	return c.Conn.Close()
}

// tlsConn is a conn over TLS. Its Handshake method tells fasthttp that
// the dialer did the handshake, and not to wrap the connection again.
type tlsConn struct{ *conn }

func (c tlsConn) Handshake() error { return c.Conn.(*tls.Conn).Handshake() }

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
		c := &conn{Conn: nc, raw: nc, owner: cs}
		c.local = &connAddr{Addr: nc.LocalAddr(), conn: c}
		if cs.open == nil {
			cs.open = make(map[*conn]struct{})
		}
		cs.open[c] = struct{}{}
		if tc, ok := nc.(*tls.Conn); ok {
			c.raw = tc.NetConn()
			return tlsConn{c}, nil
		}
		return c, nil
	}
}

// closeAll closes every connection, idle or busy, and refuses new ones.
// It closes the connections dialed, under any TLS: closing TLS sends an
// alert first, which a downstream that stopped reading would hold up.
func (cs *conns) closeAll() {
	cs.mu.Lock()
	cs.closed = true
	open := cs.open
	cs.open = nil
	cs.mu.Unlock()
	for c := range open {
		c.raw.Close()
	}
}
