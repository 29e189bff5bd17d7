package serve

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ListenerConfig sets the fast path's timeouts; give it the http.Server's.
type ListenerConfig struct {
	// ReadHeaderTimeout bounds the read of one request head (default
	// 10s): from the accept for the first request of a connection, from
	// its first byte for the next ones, as net/http counts it.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection (default 2m).
	IdleTimeout time.Duration
}

// Listener puts the cache's hot path in front of an http.Server: it accepts
// connections itself and answers the requests that are a plain GET or HEAD
// of a ready image with a 200 or 206, the kind a sanboot client sends by
// the thousand, without net/http's per-request machinery. At the first
// request it does not answer that way (another path, a 404 or 503, a 304,
// 412 or 416, anything unusual in the head) it hands the connection, with
// that request still unread, to the server through Accept, so net/http and
// Handler answer it and everything after it. Both paths give the same
// answers; the fast one is only cheaper: a read of the head, one write of
// the response head, one sendfile of the range.
type Listener struct {
	inner   net.Listener
	s       *Server
	cfg     ListenerConfig
	handoff chan net.Conn
	done    chan struct{}
	close   sync.Once
	wg      sync.WaitGroup
	date    atomic.Pointer[httpDate]
	ok200   prometheus.Counter
	ok206   prometheus.Counter

	mu      sync.Mutex
	conns   map[net.Conn]bool // fast connections; true while serving a request
	closing bool
	err     error // why the accept loop stopped
}

// Listener wraps ln. Serve it with an http.Server whose handler mounts
// Handler on PathPrefix; Close it through the server, then Shutdown it.
func (s *Server) Listener(ln net.Listener, cfg ListenerConfig) *Listener {
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	l := &Listener{
		inner: ln, s: s, cfg: cfg,
		handoff: make(chan net.Conn),
		done:    make(chan struct{}),
		conns:   make(map[net.Conn]bool),
		ok200:   s.m.Requests.WithLabelValues("200"),
		ok206:   s.m.Requests.WithLabelValues("206"),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// Accept returns the next connection handed to net/http.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case conn := <-l.handoff:
		return conn, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Addr is the address the wrapped listener accepts on.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Close stops accepting and closes the fast connections that wait for a
// request; one that is sending a response closes when it is done.
func (l *Listener) Close() error {
	err := net.ErrClosed
	l.close.Do(func() {
		l.mu.Lock()
		l.closing = true
		for conn, busy := range l.conns {
			if !busy {
				conn.Close()
			}
		}
		l.mu.Unlock()
		err = l.inner.Close()
		close(l.done)
	})
	return err
}

// Shutdown closes l and waits until its fast connections are gone, or ctx
// ends; then it closes the rest.
func (l *Listener) Shutdown(ctx context.Context) error {
	l.Close()
	idle := make(chan struct{})
	go func() { l.wg.Wait(); close(idle) }()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		for conn := range l.conns {
			conn.Close()
		}
		l.mu.Unlock()
		<-idle
		return ctx.Err()
	}
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		conn, err := l.inner.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				l.s.log.Warn("imagecache: accept failed; retrying", "err", err, "in", delay)
				select {
				case <-time.After(delay):
					continue
				case <-l.done:
					return
				}
			}
			l.mu.Lock()
			if !l.closing {
				l.err = err
			}
			l.mu.Unlock()
			l.Close()
			return
		}
		delay = 0
		if !l.track(conn, false) {
			conn.Close()
			return
		}
		l.wg.Add(1)
		go l.serveConn(conn)
	}
}

// isTemporary is an accept error worth retrying: out of file descriptors
// or memory, or a connection aborted before it was accepted.
func isTemporary(err error) bool {
	var se *os.SyscallError
	if !errors.As(err, &se) {
		return false
	}
	var t interface{ Temporary() bool }
	return errors.As(se.Err, &t) && t.Temporary()
}

// track records conn as busy or idle; false once l is closing.
func (l *Listener) track(conn net.Conn, busy bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	l.conns[conn] = busy
	return true
}

func (l *Listener) untrack(conn net.Conn) {
	l.mu.Lock()
	delete(l.conns, conn)
	l.mu.Unlock()
}

// handOff gives conn, with the bytes br read ahead, to net/http. The head
// net/http reads next must still arrive by headBy, the deadline the fast
// path held it to.
func (l *Listener) handOff(conn net.Conn, br *bufio.Reader, headBy time.Time) {
	l.untrack(conn)
	l.s.m.FastHandoffs.Inc()
	hc := &handedConn{Conn: conn, r: br, headBy: headBy}
	select {
	case l.handoff <- hc:
	case <-l.done:
		conn.Close()
	}
}

// handedConn is a connection net/http reads through the fast path's
// buffer. Its ReadFrom and CloseWrite reach the TCP connection, so
// net/http's responses keep the sendfile path and its lingering close.
type handedConn struct {
	net.Conn
	r      *bufio.Reader
	headBy time.Time   // the deadline of the head being read
	set    atomic.Bool // net/http has set its first read deadline
}

func (c *handedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// SetReadDeadline keeps net/http's first deadline, the one for the head
// the fast path began reading, no later than that head's own: handing a
// connection over does not give its client a second ReadHeaderTimeout.
func (c *handedConn) SetReadDeadline(t time.Time) error {
	if c.set.CompareAndSwap(false, true) && (t.IsZero() || t.After(c.headBy)) {
		t = c.headBy
	}
	return c.Conn.SetReadDeadline(t)
}

// ReadFrom lets net/http's response.ReadFrom reach the TCP connection's
// sendfile.
func (c *handedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// CloseWrite half-closes the TCP connection when it can.
func (c *handedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
