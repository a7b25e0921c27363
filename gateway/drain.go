package gateway

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// drainTime bounds how long a refused connection is drained.
const drainTime = 10 * time.Second

// drainBytes bounds how much of a refused connection is drained: enough
// for a body ten times max_body, which a sender that got max_body wrong may
// well send.
func drainBytes(maxBody int) int64 { return 16 * int64(maxBody) }

// drainListener hands out connections that can be drained before they
// close. The HTTP server answers a request it will not read (a body over
// max_body, a header it cannot parse) and closes the connection at once,
// while the client may still be sending: closing a socket with unread
// bytes resets it, and a client that sees the reset before it reads the
// answer reports a transport error and sends the same request again.
// Like nginx's lingering close, a drained connection first tells the client
// the answer is complete, then reads and discards what still comes, within
// maxBytes and drainTime, then closes.
type drainListener struct {
	net.Listener
	maxBytes int64
}

func (l drainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &drainConn{Conn: c, maxBytes: l.maxBytes}, nil
}

type drainConn struct {
	net.Conn
	maxBytes int64
	drain    atomic.Bool
}

// drainOnClose makes the next Close drain the connection first.
func (c *drainConn) drainOnClose() { c.drain.Store(true) }

func (c *drainConn) Close() error {
	if c.drain.Load() {
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		c.Conn.SetReadDeadline(time.Now().Add(drainTime))
		io.CopyN(io.Discard, c.Conn, c.maxBytes)
	}
	return c.Conn.Close()
}
