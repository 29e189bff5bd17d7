package httpproxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/redact"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// Request limits (admin caps the whole message at 4 MiB besides).
const (
	maxHeaders     = 64
	maxHeaderName  = 256
	maxHeaderValue = 16 << 10
	userAgent      = "siteboot-httpproxy"
)

// methods are the methods a request may use, after upper-casing.
var methods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true,
}

// refusedHeaders are names the caller may not set: the connection and
// framing are the proxy's (Connection, Keep-Alive, TE, Trailer,
// Transfer-Encoding, Content-Length, Upgrade, HTTP2-Settings, Expect), the
// Host header is always the URL's host, and Proxy-* talks to a proxy there
// is none of.
var refusedHeaders = map[string]bool{
	"host": true, "connection": true, "keep-alive": true, "te": true, "trailer": true,
	"transfer-encoding": true, "content-length": true, "upgrade": true,
	"http2-settings": true, "expect": true,
}

func invalid(format string, args ...any) error {
	return relayerr.New(relayerr.InvalidArgs, format, args...)
}

// checkMethod returns the upper-cased method; "" is GET.
func checkMethod(m string) (string, error) {
	if m == "" {
		return http.MethodGet, nil
	}
	u := strings.ToUpper(m)
	if !methods[u] {
		return "", invalid("method %q is not one of GET, HEAD, POST, PUT, PATCH, DELETE", redact.Clip(m))
	}
	return u, nil
}

// checkHeaderName refuses a name that is not a token or that the proxy
// owns. field is "headers" or "secret_headers".
func checkHeaderName(field, name string) error {
	// Names are quoted in errors and the log line: bound them first.
	if len(name) > maxHeaderName {
		return invalid("%s: name %q is longer than %d bytes", field, redact.Clip(name), maxHeaderName)
	}
	if !httpguts.ValidHeaderFieldName(name) {
		return invalid("%s: name %q is not an HTTP token", field, redact.Clip(name))
	}
	l := strings.ToLower(name)
	if refusedHeaders[l] || strings.HasPrefix(l, "proxy-") {
		return invalid("%s: %s is set by the proxy, not by the request", field, name)
	}
	return nil
}

// checkHeaderValue refuses CR, LF, NUL and other control bytes. The value
// is never quoted in the message.
func checkHeaderValue(field, name, value string) error {
	if len(value) > maxHeaderValue {
		return invalid("%s: value of %s is longer than %d bytes", field, name, maxHeaderValue)
	}
	if !httpguts.ValidHeaderFieldValue(value) {
		return invalid("%s: value of %s has a control character", field, name)
	}
	return nil
}

// checkHeaders validates the plain headers and the names and refs of the
// secret ones, before anything is resolved or sent.
func (p *Proxy) checkHeaders(req *sitev1.HttpProxyRequest) error {
	if n := len(req.GetHeaders()) + len(req.GetSecretHeaders()); n > maxHeaders {
		return invalid("%d headers, more than %d", n, maxHeaders)
	}
	for _, h := range req.GetHeaders() {
		if err := checkHeaderName("headers", h.GetName()); err != nil {
			return err
		}
		if err := checkHeaderValue("headers", h.GetName(), h.GetValue()); err != nil {
			return err
		}
	}
	for _, h := range req.GetSecretHeaders() {
		if err := checkHeaderName("secret_headers", h.GetName()); err != nil {
			return err
		}
		if err := p.cfg.Secrets.Check(h.GetValue()); err != nil {
			return relayerr.New(relayerr.CredentialsUnavailable,
				"secret_headers: %s: ref %q is not allowed", h.GetName(), redact.Ref(h.GetValue()))
		}
	}
	return nil
}

// secretHeaders reads the secret header values. One trailing newline
// ("\n" or "\r\n", as a secret file usually ends) is dropped; any other
// control byte refuses the value. Messages name the header and the ref,
// never the value.
func (p *Proxy) secretHeaders(ctx context.Context, req *sitev1.HttpProxyRequest) (http.Header, error) {
	h := http.Header{}
	for _, sh := range req.GetSecretHeaders() {
		v, err := p.cfg.Secrets.Resolve(ctx, sh.GetValue())
		if err != nil {
			return nil, relayerr.New(relayerr.CredentialsUnavailable,
				"secret_headers: %s: ref %q could not be read", sh.GetName(), redact.Ref(sh.GetValue()))
		}
		s := strings.TrimSuffix(strings.TrimSuffix(string(v), "\n"), "\r")
		if len(s) > maxHeaderValue || !httpguts.ValidHeaderFieldValue(s) {
			return nil, relayerr.New(relayerr.CredentialsUnavailable,
				"secret_headers: %s: the secret behind ref %q is not a valid header value", sh.GetName(), redact.Ref(sh.GetValue()))
		}
		h.Add(sh.GetName(), s)
	}
	return h, nil
}

// checkPin accepts no pin or a SHA-256 (32 bytes), and a pin only on https.
func checkPin(pin []byte, https bool) error {
	switch {
	case len(pin) == 0:
		return nil
	case len(pin) != 32:
		return invalid("tls_spki_sha256 is %d bytes, not 32", len(pin))
	case !https:
		return invalid("tls_spki_sha256 with an http:// url")
	}
	return nil
}

// timeout is timeout_ms, or the configured default when 0.
func (p *Proxy) timeout(ms uint32) (time.Duration, error) {
	if ms == 0 {
		return p.cfg.Timeout, nil
	}
	d := time.Duration(ms) * time.Millisecond
	if d > MaxTimeout {
		return 0, invalid("timeout_ms %d is longer than %v", ms, MaxTimeout)
	}
	return d, nil
}

// newRequest builds the request sent to t: the Host header is t's
// authority, headers as given, secret ones added.
func newRequest(ctx context.Context, method string, t *target, req *sitev1.HttpProxyRequest, secret http.Header) (*http.Request, error) {
	var body io.Reader
	if len(req.GetBody()) > 0 {
		body = bytes.NewReader(req.GetBody())
	}
	hr, err := http.NewRequestWithContext(ctx, method, t.reqURL, body)
	if err != nil {
		return nil, relayerr.New(relayerr.Internal, "build request to %s", t.authority)
	}
	hr.Host = t.authority
	hr.Close = true
	for _, h := range req.GetHeaders() {
		hr.Header.Add(h.GetName(), h.GetValue())
	}
	for k, vs := range secret {
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	if hr.Header.Get("User-Agent") == "" {
		hr.Header.Set("User-Agent", userAgent)
	}
	return hr, nil
}
