package bmc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// maxResponseBytes caps one Redfish response body.
const maxResponseBytes = 4 << 20

var (
	errPinMismatch  = errors.New("bmc: certificate does not match the pin")
	errWrongTarget  = errors.New("bmc: refusing to dial an address that was not checked")
	errResponseSize = errors.New("bmc: response body too large")
)

// trace records what happened on the wire during one operation, so that
// failures are classified from facts we saw rather than from library
// error text.
type trace struct {
	mu        sync.Mutex
	dialErr   error
	tlsErr    error
	pinFailed bool
	wrongAddr bool
	statuses  []int
}

func (t *trace) record(f func(*trace)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(t)
}

func (t *trace) snapshot() trace {
	t.mu.Lock()
	defer t.mu.Unlock()
	return trace{dialErr: t.dialErr, tlsErr: t.tlsErr, pinFailed: t.pinFailed,
		wrongAddr: t.wrongAddr, statuses: append([]int(nil), t.statuses...)}
}

// newHTTPClient is the client bmclib's redfish provider gets for one
// operation: it dials only target, checks the SPKI pin (when given) in
// the handshake, follows no redirect, uses no proxy and keeps no
// connection for later.
func newHTTPClient(target netip.AddrPort, pin []byte, tr *trace) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	tlsConf := &tls.Config{
		// BMCs ship self-signed certificates: without a pin there is
		// nothing to verify against; with one, the pin is the check.
		InsecureSkipVerify: true,
		MinVersion:         tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(pin) == 0 {
				return nil
			}
			if len(cs.PeerCertificates) == 0 {
				tr.record(func(t *trace) { t.pinFailed = true })
				return errPinMismatch
			}
			sum := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
			if !bytes.Equal(sum[:], pin) {
				tr.record(func(t *trace) { t.pinFailed = true })
				return errPinMismatch
			}
			return nil
		},
	}
	dialTLS := func(ctx context.Context, network, addr string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || ap.Addr().Unmap() != target.Addr() || ap.Port() != target.Port() {
			tr.record(func(t *trace) { t.wrongAddr = true })
			return nil, errWrongTarget
		}
		raw, err := dialer.DialContext(ctx, "tcp", target.String())
		if err != nil {
			tr.record(func(t *trace) { t.dialErr = err })
			return nil, err
		}
		conn := tls.Client(raw, tlsConf)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			tr.record(func(t *trace) { t.tlsErr = err })
			return nil, err
		}
		return conn, nil
	}
	transport := &http.Transport{
		Proxy:                  nil,
		DialTLSContext:         dialTLS,
		DialContext:            func(context.Context, string, string) (net.Conn, error) { return nil, errWrongTarget },
		DisableKeepAlives:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  30 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      false,
	}
	return &http.Client{
		Transport:     &recordingTransport{next: transport, tr: tr},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// recordingTransport notes each status and caps each body.
type recordingTransport struct {
	next http.RoundTripper
	tr   *trace
}

func (rt *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	rt.tr.record(func(t *trace) { t.statuses = append(t.statuses, resp.StatusCode) })
	resp.Body = &cappedBody{rc: resp.Body, left: maxResponseBytes}
	return resp, nil
}

type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, errResponseSize
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }
