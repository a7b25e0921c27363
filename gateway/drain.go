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
// for a body ten times maxBody, the max_body of the source it was sent to,
// which a sender that got max_body wrong may well send.
func drainBytes(maxBody int) int64 { return 16 * int64(maxBody) }

// drainListener hands out connections that can be drained before they
// close. The HTTP server answers a request it will not read (a body over
// max_body, a header it cannot parse) and closes the connection at once,
// while the client may still be sending: closing a socket with unread
// bytes resets it, and a client that sees the reset before it reads the
// answer reports a transport error and sends the same request again.
// Like nginx's lingering close, a drained connection first tells the client
// the answer is complete, then reads and discards what still comes, within
// its bound and drainTime, then closes.
type drainListener struct {
	net.Listener
}

func (l drainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &drainConn{Conn: c}, nil
}

type drainConn struct {
	net.Conn
	drain atomic.Int64 // bytes to drain at Close; 0: none
}

// drainOnClose makes the next Close drain up to maxBytes first.
func (c *drainConn) drainOnClose(maxBytes int64) { c.drain.Store(maxBytes) }

func (c *drainConn) Close() error {
	if n := c.drain.Load(); n > 0 {
		// TCP's FIN, or TLS's close_notify: the answer is complete.
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		c.Conn.SetReadDeadline(time.Now().Add(drainTime))
		io.CopyN(io.Discard, c.Conn, n)
	}
	return c.Conn.Close()
}
