package lease

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Bounds on the inbound side of the raft port.
const (
	// handshakeTimeout bounds how long an inbound connection may take to
	// complete TLS before it is dropped.
	handshakeTimeout = 5 * time.Second
	// maxPeerConns bounds the inbound connections at once, handshaking or
	// established. A peer keeps a few (raft pools 3 per peer, plus the
	// pipeline and snapshot streams), so 64 serves a cluster of 5 with room.
	maxPeerConns = 64
	// maxHandshakes bounds the inbound connections still in their TLS
	// handshake: what someone without a certificate can hold.
	maxHandshakes = 16
	// maxHandshakesPerHost bounds them per remote host, so that one host
	// without a certificate, opening connections and sending nothing,
	// cannot hold every handshake place and keep the voters from
	// reconnecting to each other.
	maxHandshakesPerHost = 4
)

// streamLayer is the raft transport's network: TCP, with mutual TLS unless
// tls is nil (plain TCP, allowed on loopback only). Inbound connections are
// handshaken off the accept loop, each within handshakeTimeout; a refused
// one is closed before raft sees a byte of it. The first byte a peer sends
// (within handshakeTimeout too) tells raft's connections from forwarded
// writes (forwardMagic), which go to the forward handler instead.
type streamLayer struct {
	ln      net.Listener
	tls     *peerTLS
	server  *tls.Config
	refuse  *refusals
	timeout time.Duration
	forward func(context.Context, net.Conn)
	ctx     context.Context // ends at Close, for the forward handler
	cancel  context.CancelFunc

	accepted   chan net.Conn
	handshakes chan struct{} // a token per handshake under way
	perHost    int           // the bound on handshakes per remote host
	done       chan struct{}
	wg         sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // every inbound connection open
	hosts  map[string]int        // handshakes under way by remote host
	max    int
	closed bool
}

var _ raft.StreamLayer = (*streamLayer)(nil)

type streamConfig struct {
	tls              *peerTLS // nil: plain TCP
	refusals         *refusals
	handshakeTimeout time.Duration
	maxConns         int
	maxHandshakes    int
	// maxHandshakesPerHost bounds the handshakes of one remote host
	// (maxHandshakes if zero).
	maxHandshakesPerHost int
	// forward serves a connection that opened with forwardMagic (the
	// first byte already read); nil refuses such connections.
	forward func(context.Context, net.Conn)
}

func newStreamLayer(ln net.Listener, cfg streamConfig) *streamLayer {
	s := &streamLayer{
		ln: ln, tls: cfg.tls, refuse: cfg.refusals, timeout: cfg.handshakeTimeout,
		accepted:   make(chan net.Conn),
		handshakes: make(chan struct{}, cfg.maxHandshakes),
		done:       make(chan struct{}),
		conns:      make(map[net.Conn]struct{}),
		hosts:      make(map[string]int),
		perHost:    cfg.maxHandshakesPerHost,
		max:        cfg.maxConns,
		forward:    cfg.forward,
	}
	if s.perHost <= 0 {
		s.perHost = cfg.maxHandshakes
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.tls != nil {
		s.server = cfg.tls.serverConfig()
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

func (s *streamLayer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or the like: wait rather than spin.
			select {
			case <-s.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		s.admit(c)
	}
}

// admit starts the handshake of a new connection, or refuses it when the
// bounds are reached.
func (s *streamLayer) admit(c net.Conn) {
	if !s.track(c) {
		s.refuse.refused(c.RemoteAddr(), reasonConnLimit, fmt.Errorf("%d inbound raft connections open", s.max))
		_ = c.Close()
		return
	}
	host := remoteHost(c)
	if !s.startHandshake(host) {
		s.refuse.refused(c.RemoteAddr(), reasonHandshakeLimit, fmt.Errorf("%d handshakes under way from %s", s.perHost, host))
		s.untrack(c)
		return
	}
	select {
	case s.handshakes <- struct{}{}:
	default:
		s.endHandshake(host)
		s.refuse.refused(c.RemoteAddr(), reasonHandshakeLimit, fmt.Errorf("%d handshakes under way", cap(s.handshakes)))
		s.untrack(c)
		return
	}
	s.wg.Add(1)
	go s.handshake(c, host)
}

// remoteHost is the host of a connection's remote address.
func remoteHost(c net.Conn) string {
	a := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(a); err == nil {
		return h
	}
	return a
}

// startHandshake takes one of host's handshake places.
func (s *streamLayer) startHandshake(host string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hosts[host] >= s.perHost {
		return false
	}
	s.hosts[host]++
	return true
}

func (s *streamLayer) endHandshake(host string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hosts[host]--; s.hosts[host] <= 0 {
		delete(s.hosts, host)
	}
}

func (s *streamLayer) handshake(raw net.Conn, host string) {
	defer s.wg.Done()
	conn, err := s.secure(raw)
	<-s.handshakes
	s.endHandshake(host)
	if err != nil {
		select {
		case <-s.done: // closing: not the peer's doing
		default:
			s.refuse.refused(raw.RemoteAddr(), classify(err), err)
		}
		s.untrack(raw)
		return
	}
	first, err := s.peek(raw, conn)
	switch {
	case err != nil:
		select {
		case <-s.done:
		default:
			s.refuse.refused(raw.RemoteAddr(), classify(err), fmt.Errorf("no first byte: %w", err))
		}
		s.untrack(raw)
		return
	case first == forwardMagic[0]:
		if s.forward != nil {
			s.forward(s.ctx, conn)
		}
		s.untrack(raw)
		return
	}
	select {
	case s.accepted <- &inboundConn{Conn: &prefixConn{Conn: conn, first: []byte{first}}, raw: raw, s: s}:
	case <-s.done:
		s.untrack(raw)
	}
}

// peek reads the first byte a peer sends, within the handshake timeout:
// raft sends its rpc type at once on every connection it opens.
func (s *streamLayer) peek(raw, conn net.Conn) (byte, error) {
	if err := raw.SetReadDeadline(time.Now().Add(s.timeout)); err != nil {
		return 0, err
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return 0, err
	}
	return b[0], raw.SetReadDeadline(time.Time{})
}

// prefixConn hands back the byte peek read before the rest of the stream.
type prefixConn struct {
	net.Conn
	first []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.first) > 0 && len(p) > 0 {
		n := copy(p, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// secure runs the TLS handshake under the handshake deadline.
func (s *streamLayer) secure(raw net.Conn) (net.Conn, error) {
	if s.tls == nil {
		return raw, nil
	}
	if err := raw.SetDeadline(time.Now().Add(s.timeout)); err != nil {
		return nil, err
	}
	tc := tls.Server(raw, s.server)
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return tc, nil
}

func (s *streamLayer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.conns) >= s.max {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// untrack closes a connection and frees its place.
func (s *streamLayer) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	_ = c.Close()
}

// Accept returns the next inbound connection that passed the handshake.
func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.accepted:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes every inbound connection, so raft's
// per-connection goroutines end too.
func (s *streamLayer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.cancel()
	conns := s.conns
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	close(s.done)
	err := s.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
	s.wg.Wait()
	return err
}

// Addr is the listener's address: the address this node's peers dial.
func (s *streamLayer) Addr() net.Addr { return s.ln.Addr() }

// Dial connects to a peer; with TLS, the peer's certificate must chain to
// the CA and name the host dialed.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 {
		timeout = handshakeTimeout
	}
	d := &net.Dialer{Timeout: timeout}
	if s.tls == nil {
		return d.Dial("tcp", string(address))
	}
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		return nil, fmt.Errorf("lease: raft peer address %q: %w", address, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	td := &tls.Dialer{NetDialer: d, Config: s.tls.clientConfig(host)}
	return td.DialContext(ctx, "tcp", string(address))
}

// inboundConn frees its place in the stream layer when closed.
type inboundConn struct {
	net.Conn
	raw  net.Conn
	s    *streamLayer
	once sync.Once
}

func (c *inboundConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.s.untrack(c.raw) })
	return err
}
