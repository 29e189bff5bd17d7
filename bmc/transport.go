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
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxResponseBytes caps one Redfish response body, maxOperationBytes the
// bodies of one operation together and maxOperationRequests its requests:
// gofish fetches every member of a collection, follows nextLink pages
// (recursively) and keeps each body it read, so a hostile BMC could
// otherwise make one operation read without end.
const (
	maxResponseBytes     = 4 << 20
	maxOperationBytes    = 16 << 20
	maxOperationRequests = 2000
)

var (
	errPinMismatch  = errors.New("bmc: certificate does not match the pin")
	errWrongTarget  = errors.New("bmc: refusing to dial an address that was not checked")
	errResponseSize = errors.New("bmc: response body too large")
	errStopped      = errors.New("bmc: the operation was stopped")
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
	tooLarge  bool // a body or the operation's bytes or requests over the cap
	stopped   bool // a request was answered here, not sent (see stop)
	masked    bool // a failed GET was answered here (see answer)
	statuses  []int
}

func (t *trace) record(f func(*trace)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(t)
}

// stoppedOr is errStopped when a request was answered by stop, or a
// failure masked outside inspect (then what the library made of the
// answers does not count), else err. Inspect keeps its result: bmclib
// skips inventory parts that fail, a masked part is as good as skipped.
func (t *trace) stoppedOr(op string, err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || (t.masked && op != opInspect) {
		return errStopped
	}
	return err
}

func (t *trace) snapshot() trace {
	t.mu.Lock()
	defer t.mu.Unlock()
	return trace{dialErr: t.dialErr, tlsErr: t.tlsErr, pinFailed: t.pinFailed,
		wrongAddr: t.wrongAddr, tooLarge: t.tooLarge, stopped: t.stopped, masked: t.masked, statuses: append([]int(nil), t.statuses...)}
}

// opLimits bound one Redfish operation (maxOperationBytes and
// maxOperationRequests; tests lower them).
type opLimits struct{ bytes, requests int64 }

// newHTTPClient is the client bmclib's redfish provider gets for one
// operation: it dials only target, checks the SPKI pin (when given) in
// the handshake, follows no redirect, uses no proxy and keeps no
// connection for later. gofish sends its requests without the
// operation's context, so the client enforces ctx itself: no request
// starts after ctx ends and every connection has ctx's deadline.
func newHTTPClient(ctx context.Context, target netip.AddrPort, pin []byte, tr *trace, lim opLimits) *http.Client {
	deadline, _ := ctx.Deadline()
	dialer := &net.Dialer{Timeout: 10 * time.Second, Deadline: deadline}
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
		if !deadline.IsZero() {
			if err := raw.SetDeadline(deadline); err != nil {
				raw.Close()
				return nil, err
			}
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
	rt := &recordingTransport{ctx: ctx, next: transport, tr: tr, maxReqs: lim.requests}
	rt.left.Store(lim.bytes)
	return &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// recordingTransport notes each status and caps each body, the bodies of
// the operation together and its requests; once ctx has ended or a cap is
// reached it sends nothing more (see stop).
type recordingTransport struct {
	ctx     context.Context
	next    http.RoundTripper
	tr      *trace
	left    atomic.Int64 // bytes the operation may still read
	reqs    atomic.Int64
	maxReqs int64
	failed  atomic.Bool // a request of the operation failed
}

func (rt *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	over := rt.left.Load() <= 0 || rt.reqs.Add(1) > rt.maxReqs
	if over || expired(rt.ctx) {
		return rt.stop(req, over), nil
	}
	resp, err := rt.next.RoundTrip(req)
	if resp != nil {
		rt.tr.record(func(t *trace) { t.statuses = append(t.statuses, resp.StatusCode) })
	}
	if (err != nil || resp.StatusCode >= 400) && rt.failed.Swap(true) && req.Method == http.MethodGet {
		if resp != nil {
			resp.Body.Close()
		}
		return rt.answer(req, func(t *trace) { t.masked = true }), nil
	}
	if err != nil {
		return nil, err
	}
	resp.Body = &cappedBody{rc: resp.Body, left: maxResponseBytes, rt: rt}
	return resp, nil
}

// stop answers req here with an empty JSON object and marks the operation
// failed (run never reports it ok). It does not fail the request: gofish
// v0.19.0 writes one map from two goroutines when a collection page fails
// after one of its members did, a fatal error; an answer that ends every
// collection at once avoids giving it the chance.
func (rt *recordingTransport) stop(req *http.Request, over bool) *http.Response {
	return rt.answer(req, func(t *trace) { t.stopped = true; t.tooLarge = t.tooLarge || over })
}

// answer is an empty JSON object for req, not sent, after note. A GET that
// fails after another request of the operation failed is answered so too
// (masked): the same gofish race needs two failures in one collection.
func (rt *recordingTransport) answer(req *http.Request, note func(*trace)) *http.Response {
	rt.tr.record(note)
	if req.Body != nil {
		req.Body.Close()
	}
	return &http.Response{Status: "200 OK", StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, ContentLength: 2,
		Body: io.NopCloser(strings.NewReader("{}")), Request: req, Close: true}
}

type cappedBody struct {
	rc   io.ReadCloser
	left int64
	rt   *recordingTransport
}

func (b *cappedBody) Read(p []byte) (int, error) {
	left := min(b.left, b.rt.left.Load())
	if left <= 0 {
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		b.rt.tr.record(func(t *trace) { t.tooLarge = true })
		return 0, errResponseSize
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	b.rt.left.Add(-int64(n))
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }
