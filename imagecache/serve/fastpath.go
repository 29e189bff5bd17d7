package serve

import (
	"bufio"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/siteboot/siteboot/internal/httpfile"
)

// readBufSize holds any request head iPXE, curl or a browser sends for a
// cache path; a larger head is net/http's to read.
const readBufSize = 4096

// serveConn reads and answers requests on one fast connection until it
// closes or a request is net/http's. Like net/http, it gives the first head
// ReadHeaderTimeout from the accept, and every later one IdleTimeout to
// begin and ReadHeaderTimeout from its first byte.
func (l *Listener) serveConn(conn net.Conn) {
	defer l.wg.Done()
	br := bufio.NewReaderSize(conn, readBufSize)
	var out []byte
	headBy := time.Now().Add(l.cfg.ReadHeaderTimeout)
	_ = conn.SetReadDeadline(headBy)
	for first := true; ; first = false {
		if !first {
			_ = conn.SetReadDeadline(time.Now().Add(l.cfg.IdleTimeout))
		}
		if _, err := br.Peek(1); err != nil {
			break
		}
		if !l.track(conn, true) {
			break
		}
		if !first {
			headBy = time.Now().Add(l.cfg.ReadHeaderTimeout)
			_ = conn.SetReadDeadline(headBy)
		}
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
			l.handOff(conn, br, headBy)
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
	b, ok, err := l.s.store.AcquireShared(h.digest)
	if err != nil || !ok {
		return out, handOff
	}
	defer b.Release()
	// AcquireShared checked the file against the one verified (size,
	// inode, mtime, ctime): no second fstat here. The file is shared:
	// read only at offsets, never closed here.
	etag := etagOf(h.digest)
	code, rng := h.conds.Answer(h.get, etag, b.Size)
	if code != http.StatusOK && code != http.StatusPartialContent {
		return out, handOff
	}
	if _, err := br.Discard(headLen); err != nil {
		return out, handOff
	}
	// The read deadline stays: nothing is read until serveConn sets the
	// next one, and a timer update per request is measurable at 20k/s.
	out = l.appendHead(out, code, etag, rng, b.Size, h.close)
	l.s.m.FastResponses.Inc()
	if code == http.StatusOK {
		l.ok200.Inc()
	} else {
		l.ok206.Inc()
	}
	if !h.get || rng.Length == 0 {
		if _, err := conn.Write(out); err != nil {
			return out, l.cut(h, rng, 0, err)
		}
		l.logServed(conn, h, code, rng.Start, 0)
		return out, keep
	}
	var n int64
	if s, ok := conn.(residentSender); ok && b.InMemory != nil && b.InMemory(rng.Start, rng.Length) {
		// As below, with the sendfile a raw system call: nothing it
		// reads waits for the disk.
		n, err = s.SendResidentAt(out, b.File, rng.Start, rng.Length)
	} else if s, ok := conn.(rangeSender); ok {
		// The head and the range's first bytes in one segment, the range
		// read at its offset: a sendmsg and a sendfile per response.
		n, err = s.SendFileAt(out, b.File, rng.Start, rng.Length)
	} else {
		n, err = writeThenCopy(conn, out, b.File, rng)
	}
	l.s.m.BytesServed.Add(float64(n))
	if err != nil {
		return out, l.cut(h, rng, n, err)
	}
	l.logServed(conn, h, code, rng.Start, n)
	return out, keep
}

// rangeSender is a connection that sends a response head and a file range
// together (internal/httpserver's connections do).
type rangeSender interface {
	SendFileAt(head []byte, f *os.File, off, n int64) (int64, error)
}

// residentSender is a rangeSender that can send a range known to be in
// memory without the runtime's system-call bookkeeping
// (internal/httpserver's connections can).
type residentSender interface {
	SendResidentAt(head []byte, f *os.File, off, n int64) (int64, error)
}

// writeThenCopy sends head, then the range, on a connection without
// SendFileAt: a write, then a copy.
func writeThenCopy(conn net.Conn, head []byte, f *os.File, rng httpfile.Range) (int64, error) {
	if _, err := conn.Write(head); err != nil {
		return 0, err
	}
	// f is shared: read at offsets, its own offset untouched.
	n, err := io.Copy(conn, io.NewSectionReader(f, rng.Start, rng.Length))
	if err == nil && n < rng.Length {
		err = io.ErrUnexpectedEOF // the file ended before the head's Content-Length
	}
	return n, err
}

// etagOf is the strong entity tag of a blob: its digest in hex, quoted.
func etagOf(d [32]byte) string {
	var b [66]byte
	b[0], b[65] = '"', '"'
	hex.Encode(b[1:65], d[:])
	return string(b[:])
}

// logServed logs what Handler logs for an answer, at Debug, plus the path.
func (l *Listener) logServed(conn net.Conn, h reqHead, code int, start, n int64) {
	if !l.s.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	method := http.MethodHead
	if h.get {
		method = http.MethodGet
	}
	l.s.log.Debug("imagecache: served", "sha256", hex.EncodeToString(h.digest[:]), "method", method, "code", code,
		"start", start, "bytes", n, "remote", conn.RemoteAddr().String(), "via", "fast path")
}

// cut logs a response that could not be finished; its connection is
// dropped, and the client sees a short body, as from net/http.
func (l *Listener) cut(h reqHead, rng httpfile.Range, sent int64, err error) outcome {
	l.s.log.Debug("imagecache: response cut short", "sha256", hex.EncodeToString(h.digest[:]), "sent", sent, "want", rng.Length, "err", err)
	return drop
}

// appendHead appends the response head net/http would send for the same
// answer from Handler.
func (l *Listener) appendHead(b []byte, code int, etag string, rng httpfile.Range, size int64, close bool) []byte {
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
	b = strconv.AppendInt(b, rng.Length, 10)
	if code == http.StatusPartialContent {
		b = append(b, "\r\nContent-Range: bytes "...)
		b = strconv.AppendInt(b, rng.Start, 10)
		b = append(b, '-')
		b = strconv.AppendInt(b, rng.Start+rng.Length-1, 10)
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
