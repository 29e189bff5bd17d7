package httpproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/redact"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// outcome is what the request's log line says beyond the request itself.
type outcome struct {
	dialled string
}

// Do makes the request. Every failure is a *relayerr.Error; any status the
// target answers (3xx and 5xx included) is a response.
func (p *Proxy) Do(ctx context.Context, req *sitev1.HttpProxyRequest) (*sitev1.HttpProxyResponse, error) {
	start := time.Now()
	var out outcome
	resp, err := p.do(ctx, req, &out)
	p.finish(req, &out, resp, err, time.Since(start))
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (p *Proxy) do(ctx context.Context, req *sitev1.HttpProxyRequest, out *outcome) (*sitev1.HttpProxyResponse, error) {
	select {
	case p.sem <- struct{}{}:
		defer func() { <-p.sem }()
	default:
		return nil, relayerr.New(relayerr.Busy, "%d proxied requests are running already", p.cfg.MaxRequests)
	}
	method, err := checkMethod(req.GetMethod())
	if err != nil {
		return nil, err
	}
	if err := p.checkHeaders(req); err != nil {
		return nil, err
	}
	pin := req.GetTlsSpkiSha256()
	if err := checkPin(pin, !strings.HasPrefix(strings.ToLower(req.GetUrl()), "http:")); err != nil {
		return nil, err
	}
	timeout, err := p.timeout(req.GetTimeoutMs())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t, err := p.checkTarget(ctx, req.GetTargetNodeId(), req.GetUrl())
	if err != nil {
		return nil, err
	}
	out.dialled = t.dialAddr().String()
	secret, err := p.secretHeaders(ctx, req)
	if err != nil {
		return nil, err
	}
	hr, err := newRequest(ctx, method, t, req, secret)
	if err != nil {
		return nil, err
	}
	return p.roundTrip(ctx, t, hr, pin, secret)
}

// roundTrip sends hr over a Transport of its own and reads the response
// up to the cap.
func (p *Proxy) roundTrip(ctx context.Context, t *target, hr *http.Request, pin []byte, secret http.Header) (*sitev1.HttpProxyResponse, error) {
	d := &dialer{p: p, t: t}
	if t.https {
		d.tlsConfig = d.newTLSConfig(pin)
	}
	tr := d.transport()
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(hr)
	if err != nil {
		return nil, d.classify(ctx, err)
	}
	defer resp.Body.Close()
	// net/http stops watching the context once it hands over a 101's raw
	// connection; closing the body at the deadline bounds every read.
	stop := context.AfterFunc(ctx, func() { resp.Body.Close() })
	defer stop()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The proxy never asks for an upgrade: a 101 would turn the
		// request into a raw stream of the target's choosing.
		return nil, relayerr.New(relayerr.Unreachable, "%s answered 101 Switching Protocols to a request that asked for no upgrade", t.dialAddr())
	}
	body, truncated, err := readCapped(resp.Body, p.cfg.MaxResponseBytes)
	switch {
	case err == nil && (truncated || ctx.Err() == nil):
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// Also when the read ended without an error: a deadline that cuts
		// the connection may look like the end of the body.
		return nil, relayerr.New(relayerr.Timeout, "the body from %s did not end within the timeout", t.dialAddr())
	case ctx.Err() != nil:
		return nil, relayerr.New(relayerr.Timeout, "the call was canceled")
	default:
		return nil, relayerr.New(relayerr.Unreachable, "reading the body from %s failed", t.dialAddr())
	}
	if name := echoedSecret(secret, resp.Header, body, truncated); name != "" {
		return nil, relayerr.New(relayerr.Internal, "the response from %s holds the value of secret header %s: withheld", t.dialAddr(), name)
	}
	return &sitev1.HttpProxyResponse{
		Status:    uint32(resp.StatusCode),
		Headers:   headersOf(resp.Header),
		Body:      body,
		Truncated: truncated,
	}, nil
}

// minEchoBytes is the shortest secret (or token of one) looked for in a
// response: a shorter one would match by chance.
const minEchoBytes = 4

// echoedSecret names the secret header whose value, or the token after
// its scheme ("Bearer <token>"), the response's headers or body hold: a
// target that reflects requests would hand the caller, who named only a
// ref, the secret. Only verbatim copies are found; a target that encodes
// the value is trusted with it anyway, as it receives it.
//
// A body cut at the cap is also withheld when it ends in the first
// minEchoBytes or more bytes of a value: the caller could pad the request
// until the cap cuts the echo just before the value's last byte.
func echoedSecret(secret, respHeader http.Header, body []byte, truncated bool) string {
	for name, vs := range secret {
		for _, v := range vs {
			needles := []string{v}
			if _, tok, ok := strings.Cut(v, " "); ok {
				needles = append(needles, tok)
			}
			for _, n := range needles {
				if len(n) >= minEchoBytes && (holds(respHeader, body, n) || truncated && endsWithPrefix(body, n)) {
					return name
				}
			}
		}
	}
	return ""
}

func endsWithPrefix(body []byte, s string) bool {
	for k := len(s) - 1; k >= minEchoBytes; k-- {
		if bytes.HasSuffix(body, []byte(s[:k])) {
			return true
		}
	}
	return false
}

func holds(h http.Header, body []byte, s string) bool {
	if bytes.Contains(body, []byte(s)) {
		return true
	}
	for k, vs := range h {
		if strings.Contains(k, s) {
			return true
		}
		for _, v := range vs {
			if strings.Contains(v, s) {
				return true
			}
		}
	}
	return false
}

// readCapped reads at most limit bytes of r, and one more to tell whether
// there was more.
func readCapped(r io.Reader, limit int64) ([]byte, bool, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(b)) > limit {
		return b[:limit], true, nil
	}
	return b, false, nil
}

// headersOf lists h sorted by name, each value its own entry in the order
// received.
func headersOf(h http.Header) []*sitev1.HttpProxyHeader {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []*sitev1.HttpProxyHeader
	for _, k := range names {
		for _, v := range h[k] {
			out = append(out, &sitev1.HttpProxyHeader{Name: k, Value: v})
		}
	}
	return out
}

// finish writes the request's one log line and its metrics. Header values
// are never logged, only names; the URL loses user info and query.
func (p *Proxy) finish(req *sitev1.HttpProxyRequest, out *outcome, resp *sitev1.HttpProxyResponse, err error, took time.Duration) {
	code := "ok"
	attrs := []slog.Attr{
		slog.String("node", redact.Clip(req.GetTargetNodeId())),
		slog.String("method", redact.Clip(req.GetMethod())),
		slog.String("url", redact.URL(req.GetUrl())),
		slog.Any("headers", headerNames(req.GetHeaders())),
		slog.Any("secret_headers", headerNames(req.GetSecretHeaders())),
		slog.Duration("duration", took),
	}
	if out.dialled != "" {
		attrs = append(attrs, slog.String("ip", out.dialled))
	}
	level := slog.LevelInfo
	if err != nil {
		code = relayerr.Code(err)
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("code", code), slog.String("error", err.Error()))
	} else {
		attrs = append(attrs, slog.Int("status", int(resp.GetStatus())),
			slog.Int("bytes", len(resp.GetBody())), slog.Bool("truncated", resp.GetTruncated()))
	}
	p.cfg.Logger.LogAttrs(context.Background(), level, "httpproxy request", attrs...)
	p.metrics.requests.WithLabelValues(code).Inc()
	p.metrics.duration.Observe(took.Seconds())
}

// headerNames lists the names of hs for the log line, clipped, at most
// maxHeaders of them (a refused request may have any number).
func headerNames(hs []*sitev1.HttpProxyHeader) []string {
	names := make([]string, 0, min(len(hs), maxHeaders+1))
	for i, h := range hs {
		if i == maxHeaders {
			names = append(names, fmt.Sprintf("… %d more", len(hs)-i))
			break
		}
		names = append(names, redact.Clip(h.GetName()))
	}
	return names
}
