package httpserver

import (
	"net"
	"sync/atomic"
	"time"
)

// refusal is what a connection over the cap gets before it is closed:
// iPXE and curl retry a 503 after its Retry-After.
const refusal = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 25\r\n\r\ntoo many open connections"

// refusalWarnEvery spaces the Warn lines about refusals, of each kind.
const refusalWarnEvery = 10 * time.Second

// refusalLog spaces the Warn lines of one kind of refusal.
type refusalLog struct {
	last  atomic.Int64 // when one was last logged at Warn, ns since Server.base
	since atomic.Int64 // refusals not yet logged at Warn
}

// listener caps the open connections, in all and per client address, and
// wraps each in a conn.
type listener struct {
	net.Listener
	s *Server
}

// Accept returns the next connection within the caps; those over one are
// refused on the spot and Accept waits for the next.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.s.open.Add(1) > int64(l.s.cfg.MaxConnections) {
			l.s.open.Add(-1)
			l.s.refuse(c, false)
			continue
		}
		src := sourceOf(c)
		if !l.s.takeSource(src) {
			l.s.open.Add(-1)
			l.s.refuse(c, true)
			continue
		}
		return newConn(c, l.s, src), nil
	}
}

// refuse answers 503 if the socket takes it at once, and closes it. The
// request is never read: the client may see the close before the answer.
// perSource says the client's address had MaxPerSource open, not the
// server MaxConnections.
func (s *Server) refuse(c net.Conn, perSource bool) {
	// Counted before the client can see the close, so a client that saw its
	// refusal also finds it in connections_refused_total.
	s.refused.Inc()
	if perSource {
		s.refusedFrom.Inc()
	}
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	_, _ = c.Write([]byte(refusal))
	c.Close()
	r := &s.refusalLog[0]
	if perSource {
		r = &s.refusalLog[1]
	}
	n := r.since.Add(1)
	now := int64(time.Since(s.base))
	if last := r.last.Load(); now-last >= int64(refusalWarnEvery) && r.last.CompareAndSwap(last, now) {
		r.since.Add(-n)
		if perSource {
			s.log.Warn("http: connections refused: max connections per source open", "refused", n,
				"max_per_source", s.cfg.MaxPerSource, "remote", c.RemoteAddr().String())
			return
		}
		s.log.Warn("http: connections refused: max connections open", "refused", n,
			"max_connections", s.cfg.MaxConnections, "remote", c.RemoteAddr().String())
	}
}
