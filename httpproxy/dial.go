package httpproxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"

	"github.com/siteboot/siteboot/internal/relayerr"
)

// maxResponseHeaderBytes bounds the status line and headers read.
const maxResponseHeaderBytes = 64 << 10

var (
	errUnexpectedDial = errors.New("httpproxy: dial of an address that was not checked")
	errPinMismatch    = errors.New("httpproxy: certificate does not match the pin")
)

// dialer connects one request to its checked address, once. net/http
// hands it the URL's host:port; it dials the checked IP instead (never
// the name again), re-checks that IP first, and refuses any other address,
// a second connection, and (in the socket's Control hook) a connect to an
// address that is not the checked one.
type dialer struct {
	p         *Proxy
	t         *target
	tlsConfig *tls.Config // nil for http

	mu          sync.Mutex
	dials       int
	dialErr     error
	tlsErr      error
	pinMismatch bool
}

func (d *dialer) dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dials++
	n := d.dials
	d.mu.Unlock()
	if n > 1 || address != d.t.dialAuthority() || (network != "tcp" && network != "tcp4" && network != "tcp6") {
		return nil, d.fail(errUnexpectedDial)
	}
	ap := d.t.dialAddr()
	if err := d.p.checkIPs([]netip.Addr{ap.Addr()}, d.t.https); err != nil {
		return nil, d.fail(err)
	}
	want := ap.String()
	nd := net.Dialer{Control: func(_, addr string, _ syscall.RawConn) error {
		if addr != want {
			return errUnexpectedDial
		}
		return nil
	}}
	conn, err := nd.DialContext(ctx, "tcp", want)
	if err != nil {
		return nil, d.fail(err)
	}
	return conn, nil
}

func (d *dialer) fail(err error) error {
	d.mu.Lock()
	d.dialErr = err
	d.mu.Unlock()
	return err
}

// dialTLS dials and does the handshake itself, so that its failures are
// told apart from the connect's and from HTTP's.
func (d *dialer) dialTLS(ctx context.Context, network, address string) (net.Conn, error) {
	conn, err := d.dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(conn, d.tlsConfig)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		d.mu.Lock()
		d.tlsErr = err
		d.mu.Unlock()
		return nil, err
	}
	return tc, nil
}

// tlsConfig is the client config for t. With a pin the pin replaces chain
// and name verification (a node may use its own CA, as Talos does): the
// leaf's SubjectPublicKeyInfo must hash to the pin. Without one the chain
// is verified against RootCAs (system roots when nil) and the name, or
// for an IP literal the IP, against the certificate's SANs.
func (d *dialer) newTLSConfig(pin []byte) *tls.Config {
	c := &tls.Config{
		ServerName: d.t.host,
		RootCAs:    d.p.cfg.RootCAs,
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
	}
	if len(pin) > 0 {
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 {
				sum := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
				if subtle.ConstantTimeCompare(sum[:], pin) == 1 {
					return nil
				}
			}
			d.mu.Lock()
			d.pinMismatch = true
			d.mu.Unlock()
			return errPinMismatch
		}
	}
	return c
}

// transport is a Transport for this one request: no proxy, no pooled
// connection, HTTP/1.1 only (no ALPN h2, empty TLSNextProto), no transparent
// decompression (the body comes back as the target sent it), bounded
// response headers.
func (d *dialer) transport() *http.Transport {
	t := &http.Transport{
		Proxy:                  nil,
		DialContext:            d.dial,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		MaxConnsPerHost:        1,
	}
	if d.tlsConfig != nil {
		t.DialTLSContext = d.dialTLS
	}
	return t
}

// classify turns a round-trip failure into a relay error with a message
// of ours (library error text is not passed on).
func (d *dialer) classify(ctx context.Context, err error) *relayerr.Error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ap := d.t.dialAddr()
	var re *relayerr.Error
	switch {
	case errors.As(d.dialErr, &re):
		return re
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return relayerr.New(relayerr.Timeout, "%s did not answer within the timeout", ap)
	case ctx.Err() != nil:
		return relayerr.New(relayerr.Timeout, "the call was canceled")
	case d.pinMismatch:
		return relayerr.New(relayerr.PinMismatch, "the certificate of %s does not match tls_spki_sha256", ap)
	case d.tlsErr != nil:
		return relayerr.New(relayerr.TLSFailed, "tls handshake with %s: %s", ap, tlsReason(d.tlsErr, d.t.host))
	case errors.Is(d.dialErr, errUnexpectedDial):
		return relayerr.New(relayerr.Internal, "refused a dial of an unchecked address")
	case errors.Is(d.dialErr, syscall.ECONNREFUSED):
		return relayerr.New(relayerr.Unreachable, "connect to %s: connection refused", ap)
	case d.dialErr != nil:
		return relayerr.New(relayerr.Unreachable, "connect to %s failed", ap)
	}
	return relayerr.New(relayerr.Unreachable, "%s did not answer with an HTTP response", ap)
}

// tlsReason says why a handshake failed, in our words.
func tlsReason(err error, host string) string {
	var (
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &ua):
		return "certificate signed by an unknown authority"
	case errors.As(err, &he):
		return "certificate is not valid for " + host
	case errors.As(err, &ci):
		return "certificate is invalid (expired, not yet valid or not for servers)"
	}
	return "handshake failed"
}
