package lease

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"github.com/siteboot/siteboot/internal/logbuf"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

type testClock struct{ t time.Time }

func (c *testClock) now() time.Time { return c.t }

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// testStream runs a stream layer with small bounds and returns it with the
// refusals it counts.
func testStream(t *testing.T, peer *peerTLS, conns, handshakes int, timeout time.Duration) (*streamLayer, *refusals) {
	t.Helper()
	ref := newRefusals(quietLog(), time.Now)
	s := newStreamLayer(listenLoopback(t), streamConfig{tls: peer, refusals: ref,
		handshakeTimeout: timeout, maxConns: conns, maxHandshakes: handshakes})
	t.Cleanup(func() { _ = s.Close() })
	return s, ref
}

func count(r *refusals, reason string) float64 {
	return refusedCount(&Node{refusals: r}, reason)
}

// expectClosed fails unless the server closes c within d, sending nothing.
func expectClosed(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %s", d)
	}
	if n != 0 {
		t.Fatalf("a refused connection got %d bytes", n)
	}
}

func loadTestTLS(t *testing.T, ca *testCA) *peerTLS {
	t.Helper()
	p, err := loadPeerTLS(ca.files(t, "appliance-1", leafOpts{}), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestStreamHandshakeDeadline(t *testing.T) {
	s, ref := testStream(t, loadTestTLS(t, newTestCA(t, "ca")), 8, 8, 200*time.Millisecond)
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	expectClosed(t, c, 5*time.Second) // a silent client
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("closed after %s, before the deadline", took)
	}
	waitFor(t, func() bool { return count(ref, reasonTimeout) == 1 })
}

func TestStreamBoundsHandshakes(t *testing.T) {
	s, ref := testStream(t, loadTestTLS(t, newTestCA(t, "ca")), 8, 2, 2*time.Second)
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	waitFor(t, func() bool { return len(s.handshakes) == 2 })
	third, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	expectClosed(t, third, time.Second) // at once, not after the deadline
	if got := count(ref, reasonHandshakeLimit); got != 1 {
		t.Fatalf("refused handshake_limit = %v; want 1", got)
	}
	// Closing the stream layer ends the pending handshakes at once.
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Close took %s with handshakes pending", took)
	}
	for _, c := range idle {
		expectClosed(t, c, time.Second)
	}
	if got := count(ref, reasonTimeout) + count(ref, reasonHandshake); got != 0 {
		t.Fatalf("closing counted %v refusals; the peers did nothing wrong", got)
	}
}

func TestStreamBoundsConnections(t *testing.T) {
	s, ref := testStream(t, nil, 2, 2, time.Second) // plain: accepted at once
	accept := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte{0}); err != nil { // raft's first byte: an rpc type
			t.Fatal(err)
		}
		got, err := s.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first := accept()
	accept()
	over, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	expectClosed(t, over, time.Second)
	if got := count(ref, reasonConnLimit); got != 1 {
		t.Fatalf("refused conn_limit = %v; want 1", got)
	}
	// A closed connection frees its place.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	accept()
}

func TestStreamAcceptAfterClose(t *testing.T) {
	s, _ := testStream(t, nil, 2, 2, time.Second)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v; want net.ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// TestStreamDialChecksServer: the dialing side trusts only a server with a
// site certificate that names the address dialed.
func TestStreamDialChecksServer(t *testing.T) {
	ca := newTestCA(t, "site ca")
	client, _ := testStream(t, loadTestTLS(t, ca), 8, 8, time.Second)

	foreign := newTestCA(t, "another ca").keyPair(t, "impostor", leafOpts{})
	ln := listenLoopback(t)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{foreign}})
			_ = tc.Handshake()
			_ = tc.Close()
		}
	}()
	_, err := client.Dial(raft.ServerAddress("127.0.0.1:"+portOf(ln)), time.Second)
	var ua x509.UnknownAuthorityError
	if !errors.As(err, &ua) {
		t.Fatalf("Dial to a server of another CA = %v; want an unknown authority error", err)
	}

	// A site server dialed by a name its certificate does not carry.
	server, _ := testStream(t, loadTestTLS(t, ca), 8, 8, time.Second)
	_, err = client.Dial(raft.ServerAddress("localhost:"+portOf(server.ln)), time.Second)
	var he x509.HostnameError
	if !errors.As(err, &he) {
		t.Fatalf("Dial by a name the certificate lacks = %v; want a name mismatch", err)
	}
}

func portOf(ln net.Listener) string {
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

func TestRefusalLogIsRateLimited(t *testing.T) {
	var buf logbuf.Buffer
	clk := &testClock{t: time.Unix(1e9, 0)}
	r := newRefusals(bufferLog(&buf), clk.now)
	remote := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4242}
	for range 5 {
		r.refused(remote, reasonNotTLS, errors.New("first record does not look like a TLS handshake"))
	}
	r.refused(remote, reasonNoCertificate, errNoPeerCert)
	clk.t = clk.t.Add(refusalLogEvery)
	r.refused(remote, reasonNotTLS, errors.New("again"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("log:\n%s\nwant 3 lines (not_tls, no_certificate, not_tls again)", buf.String())
	}
	for i, want := range []string{"reason=not_tls", "reason=no_certificate", "reason=not_tls"} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], "remote=192.0.2.7:4242") {
			t.Errorf("line %d = %q; want %s and the remote address", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[2], "suppressed=4") {
		t.Errorf("line 2 = %q; want suppressed=4", lines[2])
	}
	if got := count(r, reasonNotTLS); got != 6 {
		t.Errorf("counted %v not_tls refusals; want 6 (every one, logged or not)", got)
	}
}

// TestStreamHandshakesPerHost: one host without a certificate, opening
// connections and sending nothing, holds at most its share of the
// handshake places; a site peer from another host still gets through.
func TestStreamHandshakesPerHost(t *testing.T) {
	ca := newTestCA(t, "ca")
	ref := newRefusals(quietLog(), time.Now)
	s := newStreamLayer(listenLoopback(t), streamConfig{tls: loadTestTLS(t, ca), refusals: ref,
		handshakeTimeout: 5 * time.Second, maxConns: 16, maxHandshakes: 4, maxHandshakesPerHost: 2})
	t.Cleanup(func() { _ = s.Close() })
	stranger := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for range 4 {
		c, err := stranger.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitFor(t, func() bool { return len(s.handshakes)+int(count(ref, reasonHandshakeLimit)) == 4 })
	cert := ca.keyPair(t, "appliance-2", leafOpts{})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	peer, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", s.Addr().String(),
		&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatalf("a site peer could not connect while a stranger held handshakes: %v", err)
	}
	defer peer.Close()
	if _, err := peer.Write([]byte{0}); err != nil { // raft's first byte
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := s.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the site peer's connection never reached raft")
	}
	if got := count(ref, reasonHandshakeLimit); got != 2 {
		t.Fatalf("refused handshake_limit = %v; want 2 (the stranger's connections past its 2)", got)
	}
}
