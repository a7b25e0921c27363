package sender_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/forward"
	"github.com/webhookd/webhookd/forward/sender"
)

// acceptRaw accepts a delivery without a resource, with the given body and
// content type.
func acceptRaw(t *testing.T, s backend, requestID, contentType, body string) {
	t.Helper()
	decide(t, s, webhookd.Delivery{
		Source: "billing", RequestID: requestID, ReceivedAt: time.Now(),
		Forward: true, Routes: []string{defaultRoute}, Body: []byte(body), ContentType: contentType,
	})
}

// The request goes to the configured URI as written, query included. A
// delivery without a content type is sent without one, and headers that
// frame the request are the client's, whatever the configuration says.
// Only the answer's status matters: a long answer counts, and is not read
// whole; a long header does not make it fail either.
func TestRequestAndAnswerOnTheWire(t *testing.T) {
	s := openStore(t, t.TempDir())
	var gotURI, gotHost, gotType, gotProxy atomic.Value
	var gotClose atomic.Bool
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		gotURI.Store(r.RequestURI)
		gotHost.Store(r.Host)
		gotClose.Store(r.Close)
		gotType.Store(strings.Join(r.Header.Values("Content-Type"), ","))
		gotProxy.Store(r.Header.Get("Proxy-Authorization") + r.Header.Get("Proxy-Connection"))
		for i := range 100 { // 20 KB of header
			w.Header().Add("Set-Cookie", fmt.Sprintf("c%d=%s", i, strings.Repeat("v", 200)))
		}
		w.Write([]byte(strings.Repeat("x", 1<<20)))
	}))
	t.Cleanup(down.Close)
	r := route(down.URL + "/hooks//a%2Fb?token=x%20y&n=1")
	r.Headers = map[string]string{"Host": "elsewhere.example", "Connection": "close", "Content-Length": "1",
		"Proxy-Authorization": "Basic c2VjcmV0", "Proxy-Connection": "close"}
	start(t, s, map[forward.Target]sender.Route{target("billing"): r})
	acceptRaw(t, s, "req-1", "", "a=1")
	eventually(t, "delivered", delivered(t, s, "req-1"))
	if f := status(t, s, "billing", "req-1"); f.Attempts != 1 || f.LastStatus != 200 {
		t.Errorf("forward status = %+v, want delivered at the first attempt", f)
	}
	if u := gotURI.Load(); u != "/hooks//a%2Fb?token=x%20y&n=1" {
		t.Errorf("request URI = %q, want the configured one as written", u)
	}
	if h := gotHost.Load(); h != strings.TrimPrefix(down.URL, "http://") {
		t.Errorf("Host = %q, want the downstream's", h)
	}
	if gotClose.Load() {
		t.Error("the request asked to close its connection")
	}
	if ct := gotType.Load(); ct != "" {
		t.Errorf("Content-Type = %q, want none", ct)
	}
	if p := gotProxy.Load(); p != "" {
		t.Errorf("proxy headers %q reached the downstream", p)
	}
}

// A request sent on a kept-alive connection the downstream closed while
// it was idle is sent again at once, on a fresh connection, within its
// attempt: the downstream gets it once, as attempt 1. Over TLS too, whose
// handshake reads and writes before the first request.
func TestIdleConnectionTheDownstreamClosedCostsNoAttempt(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", secure), func(t *testing.T) {
			s := openStore(t, t.TempDir())
			down := &downstream{}
			if secure {
				down.Server = httptest.NewTLSServer(http.HandlerFunc(down.serve))
			} else {
				down.Server = httptest.NewServer(http.HandlerFunc(down.serve))
			}
			t.Cleanup(down.Close)
			f := sender.New(s, map[forward.Target]sender.Route{target("billing"): route(down.URL)}, zaptest.NewLogger(t))
			if secure {
				roots := x509.NewCertPool()
				roots.AddCert(down.Certificate())
				sender.SetTLSConfig(f, &tls.Config{RootCAs: roots})
			}
			if err := f.Open(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close(ctx) })
			acceptRaw(t, s, "req-1", "application/json", "{}")
			eventually(t, "first delivered", delivered(t, s, "req-1"))
			down.CloseClientConnections()
			acceptRaw(t, s, "req-2", "application/json", "{}")
			eventually(t, "second delivered", delivered(t, s, "req-2"))
			if f := status(t, s, "billing", "req-2"); f.Attempts != 1 {
				t.Errorf("forward status = %+v, want delivered at the first attempt", f)
			}
			var attempts []string
			for _, a := range down.all() {
				if a.header.Get("Idempotency-Key") == "req-2" {
					attempts = append(attempts, a.header.Get("Webhook-Attempt"))
				}
			}
			if len(attempts) != 1 || attempts[0] != "1" {
				t.Errorf("Webhook-Attempt of each req-2 received: %v, want [1]", attempts)
			}
		})
	}
}

// keepAliveListener notes which of its connections the client closed: a
// read that ends in EOF, where the server's own close ends it otherwise.
type keepAliveListener struct {
	net.Listener
	mu           sync.Mutex
	conns        int
	clientClosed int
}

func (l *keepAliveListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns++
	l.mu.Unlock()
	return &keepAliveConn{Conn: c, l: l}, nil
}

type keepAliveConn struct {
	net.Conn
	l    *keepAliveListener
	once sync.Once
}

func (c *keepAliveConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err == io.EOF {
		c.once.Do(func() {
			c.l.mu.Lock()
			c.l.clientClosed++
			c.l.mu.Unlock()
		})
	}
	return n, err
}

// A downstream that closes connections idle for 5 s, as Node's HTTP
// server does (Express, Fastify): after 6 s of quiet, the next forward
// goes out on its first attempt, on a connection webhookd closed first.
// The 5 s are the server's, and cannot be shortened.
func TestKeepAliveOfNodesLength(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kl := &keepAliveListener{Listener: ln}
	down := &downstream{}
	srv := &http.Server{Handler: http.HandlerFunc(down.serve), IdleTimeout: 5 * time.Second}
	go srv.Serve(kl)
	t.Cleanup(func() { srv.Close() })
	s := openStore(t, t.TempDir())
	start(t, s, map[forward.Target]sender.Route{target("billing"): route("http://" + ln.Addr().String())})
	acceptRaw(t, s, "req-1", "application/json", "{}")
	eventually(t, "first delivered", delivered(t, s, "req-1"))
	time.Sleep(6 * time.Second)
	acceptRaw(t, s, "req-2", "application/json", "{}")
	eventually(t, "second delivered", delivered(t, s, "req-2"))
	if f := status(t, s, "billing", "req-2"); f.Attempts != 1 {
		t.Errorf("forward status = %+v, want delivered at the first attempt", f)
	}
	kl.mu.Lock()
	defer kl.mu.Unlock()
	if kl.conns != 2 || kl.clientClosed != 1 {
		t.Errorf("%d connections, %d closed by webhookd; want 2, the first closed by webhookd before the downstream did", kl.conns, kl.clientClosed)
	}
}

func TestForwardsOverTLS(t *testing.T) {
	s := openStore(t, t.TempDir())
	var got atomic.Value
	down := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
	}))
	t.Cleanup(down.Close)
	roots := x509.NewCertPool()
	roots.AddCert(down.Certificate())
	f := sender.New(s, map[forward.Target]sender.Route{target("billing"): route(down.URL)}, zaptest.NewLogger(t))
	sender.SetTLSConfig(f, &tls.Config{RootCAs: roots})
	if err := f.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	acceptRaw(t, s, "req-1", "application/json", `{"secure":true}`)
	eventually(t, "delivered", delivered(t, s, "req-1"))
	if b := got.Load(); b != `{"secure":true}` {
		t.Errorf("body = %v", b)
	}
}

// connectProxy is an HTTP proxy on loopback that tunnels CONNECT requests
// from user "u", password "p", sending every one to target whatever host
// it names.
func connectProxy(t *testing.T, target string) (addr string, tunnels *atomic.Int32) {
	return loopbackProxy(t, target, func(c net.Conn, r *bufio.Reader) ([]byte, bool) {
		req, err := http.ReadRequest(r)
		if err != nil || req.Method != http.MethodConnect || !strings.HasPrefix(req.Host, "downstream.invalid:") {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\n\r\n")
			return nil, false
		}
		if req.Header.Get("Proxy-Authorization") != "Basic dTpw" {
			io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
			return nil, false
		}
		return []byte("HTTP/1.1 200 Connection established\r\n\r\n"), true
	})
}

// silentProxy takes connections and never answers; reached is closed when
// the first arrives.
func silentProxy(t *testing.T) (addr string, reached <-chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	first := make(chan struct{})
	go func() {
		var once sync.Once
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			once.Do(func() { close(first) })
			go func() {
				defer c.Close()
				io.Copy(io.Discard, c) // until the client gives up
			}()
		}
	}()
	return ln.Addr().String(), first
}

// loopbackProxy listens on loopback and runs handshake on each connection:
// it reads the client's request and returns the reply that opens the
// tunnel, or false to drop the connection. Every tunnel goes to target, and
// is counted.
func loopbackProxy(t *testing.T, target string, handshake func(c net.Conn, r *bufio.Reader) (reply []byte, ok bool)) (addr string, tunnels *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tunnels = new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				reply, ok := handshake(c, r)
				if !ok {
					return
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				tunnels.Add(1)
				c.Write(reply)
				go io.Copy(up, r) // what the client sent after the handshake may be buffered in r
				io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String(), tunnels
}

// HTTP_PROXY is honoured as Go's own client honours it, for an HTTP and a
// SOCKS5 proxy. The downstream's name does not resolve, so only the proxy
// can reach it.
func TestForwardsThroughTheEnvironmentsProxy(t *testing.T) {
	for _, p := range []struct {
		scheme string
		serve  func(t *testing.T, target string) (addr string, tunnels *atomic.Int32)
	}{
		{"http", connectProxy},
		{"socks5", socks5Proxy},
	} {
		t.Run(p.scheme, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			down := newDownstream(t, nil)
			addr := strings.TrimPrefix(down.URL, "http://")
			proxy, tunnels := p.serve(t, addr)
			t.Setenv("HTTP_PROXY", p.scheme+"://u:p@"+proxy)
			t.Setenv("NO_PROXY", "")
			_, port, _ := net.SplitHostPort(addr)
			start(t, s, map[forward.Target]sender.Route{target("billing"): route("http://downstream.invalid:" + port + "/hooks")})
			acceptRaw(t, s, "req-1", "application/json", "{}")
			eventually(t, "delivered", delivered(t, s, "req-1"))
			if n := tunnels.Load(); n < 1 {
				t.Errorf("proxy tunnels = %d, want the delivery through it", n)
			}
		})
	}
}

// A proxy that takes the connection and never answers costs an attempt
// its timeout, not the lane for good, and does not hold up Close.
func TestSilentProxy(t *testing.T) {
	for _, scheme := range []string{"http", "socks5"} {
		t.Run(scheme, func(t *testing.T) {
			proxy, _ := silentProxy(t)
			t.Setenv("HTTP_PROXY", scheme+"://"+proxy)
			t.Setenv("NO_PROXY", "")
			s := openStore(t, t.TempDir())
			r := route("http://downstream.invalid:9/hooks")
			r.Timeout = 200 * time.Millisecond
			start(t, s, map[forward.Target]sender.Route{target("billing"): r})
			acceptRaw(t, s, "req-1", "application/json", "{}")
			eventually(t, "a failed attempt", func() bool { return status(t, s, "billing", "req-1").Attempts >= 1 })
		})
		t.Run(scheme+" at Close", func(t *testing.T) {
			proxy, reached := silentProxy(t)
			t.Setenv("HTTP_PROXY", scheme+"://"+proxy)
			t.Setenv("NO_PROXY", "")
			s := openStore(t, t.TempDir())
			r := route("http://downstream.invalid:9/hooks")
			r.Timeout = time.Minute
			f := start(t, s, map[forward.Target]sender.Route{target("billing"): r})
			acceptRaw(t, s, "req-1", "application/json", "{}")
			<-reached
			closeCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			closed := make(chan struct{})
			go func() { f.Close(closeCtx); close(closed) }()
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("Close waited for the proxy's handshake past its context")
			}
		})
	}
}

// socks5Proxy is a SOCKS5 proxy on loopback (no authentication, CONNECT
// only) that tunnels every connection to target whatever host it names.
func socks5Proxy(t *testing.T, target string) (addr string, tunnels *atomic.Int32) {
	return loopbackProxy(t, target, func(c net.Conn, r *bufio.Reader) ([]byte, bool) {
		greeting := make([]byte, 2)
		if _, err := io.ReadFull(r, greeting); err != nil || greeting[0] != 5 {
			return nil, false
		}
		if _, err := io.ReadFull(r, make([]byte, greeting[1])); err != nil {
			return nil, false
		}
		c.Write([]byte{5, 0})   // no authentication
		head := make([]byte, 4) // version, CONNECT, reserved, address type
		if _, err := io.ReadFull(r, head); err != nil || head[1] != 1 {
			return nil, false
		}
		var skip int
		switch head[3] {
		case 1:
			skip = 4
		case 4:
			skip = 16
		case 3:
			n, err := r.ReadByte()
			if err != nil {
				return nil, false
			}
			skip = int(n)
		}
		if _, err := io.ReadFull(r, make([]byte, skip+2)); err != nil { // address and port
			return nil, false
		}
		return []byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}, true
	})
}

func TestOpenRefusesAProxyItCannotUse(t *testing.T) {
	s := openStore(t, t.TempDir())
	t.Setenv("HTTPS_PROXY", "ftp://proxy.invalid:21")
	t.Setenv("NO_PROXY", "")
	f := sender.New(s, map[forward.Target]sender.Route{target("billing"): route("https://downstream.invalid/hooks")}, zaptest.NewLogger(t))
	err := f.Open()
	if err == nil {
		f.Close(ctx)
		t.Fatal("Open accepted an ftp proxy")
	}
	if !strings.Contains(err.Error(), "billing") || !strings.Contains(err.Error(), `scheme "ftp"`) {
		t.Errorf("error = %v, want the source and the proxy's scheme named", err)
	}
	// The gateway closes what it opened when starting fails: a forwarder
	// that never started must not wait for itself.
	closed := make(chan error, 1)
	go func() { closed <- f.Close(ctx) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close after a failed Open: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close after a failed Open did not return")
	}
}
