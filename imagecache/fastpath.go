package imagecache

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ListenerConfig sets the fast path's timeouts; give it the http.Server's.
type ListenerConfig struct {
	// ReadHeaderTimeout bounds the read of one request head (default 10s).
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
	c       *Cache
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
func (c *Cache) Listener(ln net.Listener, cfg ListenerConfig) *Listener {
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	l := &Listener{
		inner: ln, c: c, cfg: cfg,
		handoff: make(chan net.Conn),
		done:    make(chan struct{}),
		conns:   make(map[net.Conn]bool),
		ok200:   c.m.requests.WithLabelValues("200"),
		ok206:   c.m.requests.WithLabelValues("206"),
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
				l.c.log.Warn("imagecache: accept failed; retrying", "err", err, "in", delay)
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

// readBufSize holds any request head iPXE, curl or a browser sends for a
// cache path; a larger head is net/http's to read.
const readBufSize = 4096

func (l *Listener) serveConn(conn net.Conn) {
	defer l.wg.Done()
	br := bufio.NewReaderSize(conn, readBufSize)
	var out []byte
	timeout := l.cfg.ReadHeaderTimeout
	for {
		_ = conn.SetReadDeadline(time.Now().Add(timeout))
		if _, err := br.Peek(1); err != nil {
			break
		}
		timeout = l.cfg.IdleTimeout
		if !l.track(conn, true) {
			break
		}
		_ = conn.SetReadDeadline(time.Now().Add(l.cfg.ReadHeaderTimeout))
		head, err := readHead(br)
		if err != nil && err != errTooBig {
			break
		}
		next := handOff
		var h reqHead
		if err == nil {
			var ok bool
			if h, ok = parseHead(head); ok {
				out, next = l.serve(conn, br, len(head), h, out[:0])
			}
		}
		if next == handOff {
			l.handOff(conn, br)
			return
		}
		if next == drop || h.close || !l.track(conn, false) {
			break
		}
	}
	l.untrack(conn)
	conn.Close()
}

// outcome is what follows a request on a fast connection.
type outcome int

const (
	handOff outcome = iota // the request is unread: net/http answers it
	keep                   // answered: read the next request
	drop                   // the response was cut short: close
)

// serve answers one parsed request if the image is ready and the answer is
// a 200 or 206, and otherwise leaves it unread for net/http. A failure
// after the response head went out drops the connection, as net/http
// does.
func (l *Listener) serve(conn net.Conn, br *bufio.Reader, headLen int, h reqHead, out []byte) ([]byte, outcome) {
	c := l.c
	e, f, state, err := c.acquire(h.digest)
	if err != nil || e == nil || state != StateReady {
		return out, handOff
	}
	defer c.release(e)
	defer f.Close()
	size := e.size
	if fi, err := f.Stat(); err != nil || fi.Size() != size {
		return out, handOff // Handler logs it and answers 500
	}
	etag := `"` + hexOf(e.digest) + `"`
	code, rng := h.conds.answer(h.get, etag, size)
	if code != http.StatusOK && code != http.StatusPartialContent {
		return out, handOff
	}
	if _, err := br.Discard(headLen); err != nil {
		return out, handOff
	}
	_ = conn.SetReadDeadline(time.Time{})
	out = l.appendHead(out, code, etag, rng, size, h.close)
	c.m.fastServed.Inc()
	if code == http.StatusOK {
		l.ok200.Inc()
	} else {
		l.ok206.Inc()
	}
	if _, err := conn.Write(out); err != nil {
		return out, l.cut(e, rng, 0, err)
	}
	if !h.get || rng.length == 0 {
		l.logServed(conn, e, h, code, rng.start, 0)
		return out, keep
	}
	if _, err := f.Seek(rng.start, io.SeekStart); err != nil {
		return out, l.cut(e, rng, 0, err)
	}
	n, err := io.CopyN(conn, f, rng.length) // conn.ReadFrom: sendfile
	c.m.bytesServed.Add(float64(n))
	if err != nil {
		return out, l.cut(e, rng, n, err)
	}
	l.logServed(conn, e, h, code, rng.start, n)
	return out, keep
}

// logServed logs what Handler logs for an answer, at Debug, plus the path.
func (l *Listener) logServed(conn net.Conn, e *entry, h reqHead, code int, start, n int64) {
	if !l.c.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	method := http.MethodHead
	if h.get {
		method = http.MethodGet
	}
	l.c.log.Debug("imagecache: served", "sha256", hexOf(e.digest), "method", method, "code", code,
		"start", start, "bytes", n, "remote", conn.RemoteAddr().String(), "via", "fast path")
}

// cut logs a response that could not be finished; its connection is
// dropped, and the client sees a short body, as from net/http.
func (l *Listener) cut(e *entry, rng byteRange, sent int64, err error) outcome {
	l.c.log.Debug("imagecache: response cut short", "sha256", hexOf(e.digest), "sent", sent, "want", rng.length, "err", err)
	return drop
}

// appendHead appends the response head net/http would send for the same
// answer from Handler.
func (l *Listener) appendHead(b []byte, code int, etag string, rng byteRange, size int64, close bool) []byte {
	if code == http.StatusPartialContent {
		b = append(b, "HTTP/1.1 206 Partial Content\r\n"...)
	} else {
		b = append(b, "HTTP/1.1 200 OK\r\n"...)
	}
	b = append(b, "Accept-Ranges: bytes\r\nCache-Control: public, max-age=31536000, immutable\r\n"...)
	if close {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, rng.length, 10)
	if code == http.StatusPartialContent {
		b = append(b, "\r\nContent-Range: bytes "...)
		b = strconv.AppendInt(b, rng.start, 10)
		b = append(b, '-')
		b = strconv.AppendInt(b, rng.start+rng.length-1, 10)
		b = append(b, '/')
		b = strconv.AppendInt(b, size, 10)
	}
	b = append(b, "\r\nContent-Type: application/octet-stream\r\nDate: "...)
	b = append(b, l.now()...)
	b = append(b, "\r\nEtag: "...)
	b = append(b, etag...)
	return append(b, "\r\nX-Content-Type-Options: nosniff\r\n\r\n"...)
}

// httpDate is the Date header value of one second.
type httpDate struct {
	unix int64
	text string
}

func (l *Listener) now() string {
	t := time.Now()
	if d := l.date.Load(); d != nil && d.unix == t.Unix() {
		return d.text
	}
	d := &httpDate{unix: t.Unix(), text: t.UTC().Format(http.TimeFormat)}
	l.date.Store(d)
	return d.text
}

// handOff gives conn, with the bytes br read ahead, to net/http.
func (l *Listener) handOff(conn net.Conn, br *bufio.Reader) {
	l.untrack(conn)
	_ = conn.SetReadDeadline(time.Time{})
	l.c.m.fastHanded.Inc()
	hc := &handedConn{Conn: conn, r: br}
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
	r *bufio.Reader
}

func (c *handedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

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
