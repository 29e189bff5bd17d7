package httpproxy

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
)

func hdr(kv ...string) []*sitev1.HttpProxyHeader {
	var out []*sitev1.HttpProxyHeader
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &sitev1.HttpProxyHeader{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

// hostileCase is a request that must be refused with code before any
// packet: no listener of the fixture (the allowed ones included) may see a
// connection, and the resolver must be asked exactly lookups times.
type hostileCase struct {
	name    string
	node    string // "" is node-a
	url     string // {P} is the fixture port
	method  string
	headers []*sitev1.HttpProxyHeader
	secret  []*sitev1.HttpProxyHeader
	code    string
	lookups int
}

var hostileCases = []hostileCase{
	// IPv4 in other encodings: not IP literals, not DNS names.
	{name: "hex-int-stray", url: "https://0x7f000002:{P}/"},
	{name: "decimal-int-stray", url: "https://2130706434:{P}/"},
	{name: "octal-stray", url: "https://0177.0.0.2:{P}/"},
	{name: "short-form-stray", url: "https://127.2:{P}/"},
	{name: "hex-int-allowed", url: "https://0x7f000001:{P}/"},
	{name: "decimal-int-allowed", url: "https://2130706433:{P}/"},
	{name: "octal-allowed", url: "https://0177.0.0.01:{P}/"},
	{name: "short-form-allowed", url: "https://127.1:{P}/"},
	{name: "hex-dotted-allowed", url: "https://0x7f.0.0.1:{P}/"},
	{name: "leading-zero-allowed", url: "https://127.000.000.001:{P}/"},
	// IPv6 forms of IPv4 and zones.
	{name: "v4-mapped-stray", url: "https://[::ffff:127.0.0.2]:{P}/"},
	{name: "v4-mapped-hex-stray", url: "https://[::ffff:7f00:2]:{P}/"},
	{name: "v4-compatible-stray", url: "https://[::127.0.0.2]:{P}/"},
	{name: "v4-compatible-allowed", url: "https://[::127.0.0.1]:{P}/"},
	{name: "bracketed-v4", url: "https://[127.0.0.1]:{P}/"},
	{name: "zone-link-local", url: "https://[fe80::1%25lo]:{P}/"},
	{name: "zone-on-mapped-allowed", url: "https://[::ffff:127.0.0.1%25lo]:{P}/"},
	{name: "unbracketed-v6", url: "https://::ffff:127.0.0.1:{P}/"},
	// User info and other ways of hiding the host.
	{name: "userinfo-allowed-at-stray", url: "https://127.0.0.1@127.0.0.2:{P}/"},
	{name: "userinfo-name-at-stray", url: "https://allowed.test:{P}@127.0.0.2:{P}/"},
	{name: "userinfo-on-allowed", url: "https://user:pass@127.0.0.1:{P}/"},
	{name: "backslash-userinfo", url: "https://127.0.0.1\\@127.0.0.2:{P}/"},
	{name: "percent-encoded-host", url: "https://%31%32%37.0.0.1:{P}/"},
	{name: "no-scheme", url: "//127.0.0.1:{P}/"},
	{name: "opaque", url: "https:127.0.0.1:{P}"},
	{name: "fragment", url: "https://127.0.0.1:{P}/#top"},
	{name: "empty-url", url: ""},
	// A space in the query or path would go into the request line as it is.
	{name: "space-in-query", url: "https://127.0.0.1:{P}/?a HTTP/1.0\tx"},
	{name: "space-in-query-request-line", url: "https://127.0.0.1:{P}/?a HTTP/1.0 x"},
	{name: "space-in-raw-path", url: "https://127.0.0.1:{P}/a b"},
	// Trailing dots and case.
	{name: "trailing-dot-stray-ip", url: "https://127.0.0.2.:{P}/"},
	{name: "trailing-dot-allowed-ip", url: "https://127.0.0.1.:{P}/"},
	{name: "two-trailing-dots", url: "https://allowed.test..:{P}/"},
	{name: "upper-case-other-node-name", url: "https://OTHER.TEST.:{P}/"},
	{name: "suffix-of-allowed-name", url: "https://allowed.test.evil:{P}/"},
	{name: "prefix-of-allowed-name", url: "https://evil.allowed.test:{P}/"},
	// Ports.
	{name: "empty-port", url: "https://127.0.0.1:/"},
	{name: "port-0", url: "https://127.0.0.1:0/"},
	{name: "port-65536", url: "https://127.0.0.1:65536/"},
	{name: "port-plus-sign", url: "https://127.0.0.1:+{P}/"},
	{name: "port-leading-zero", url: "https://127.0.0.1:0{P}/"},
	// Schemes.
	{name: "scheme-ftp", url: "ftp://127.0.0.1:{P}/"},
	{name: "scheme-file", url: "file:///etc/passwd"},
	{name: "scheme-gopher", url: "gopher://127.0.0.1:{P}/_GET"},
	{name: "scheme-HTTP-upper-non-provisioning", url: "HTTP://127.0.0.1:{P}/"},
	{name: "http-non-provisioning", url: "http://127.0.0.1:{P}/"},
	{name: "http-by-name-non-provisioning", url: "http://allowed.test:{P}/", lookups: 1},
	// The allow-list itself.
	{name: "other-node-ip", url: "https://127.0.0.3:{P}/"},
	{name: "other-node-name", url: "https://other.test:{P}/"},
	{name: "unlisted-name-not-resolved", url: "https://unlisted.test:{P}/"},
	{name: "node-not-in-spec", node: "node-z", url: "https://127.0.0.1:{P}/"},
	{name: "listed-ip-in-deny", url: "https://127.0.0.4:{P}/"},
	{name: "name-resolving-into-deny", url: "https://denied.test:{P}/", lookups: 1},
	{name: "mixed-answers", url: "https://mixed.test:{P}/", lookups: 1},
	{name: "name-resolving-to-unlisted-ip", url: "https://nameonly.test:{P}/", lookups: 1},
	{name: "answer-with-zone", url: "https://zone.test:{P}/", lookups: 1},
	{name: "listed-unspecified", url: "https://0.0.0.0:{P}/"},
	{name: "listed-alt-encoding-in-spec", url: "https://0x7f000002:{P}/"},
	// Request shape: Host override, CONNECT, TRACE, Upgrade, framing.
	{name: "host-header-override", url: "https://127.0.0.1:{P}/", headers: hdr("Host", "127.0.0.2"), code: relayerr.InvalidArgs},
	{name: "host-header-lower-case", url: "https://127.0.0.1:{P}/", headers: hdr("host", "other.test"), code: relayerr.InvalidArgs},
	{name: "host-as-secret-header", url: "https://127.0.0.1:{P}/", secret: hdr("Host", "file:///x"), code: relayerr.InvalidArgs},
	{name: "method-connect", url: "https://127.0.0.1:{P}/", method: "CONNECT", code: relayerr.InvalidArgs},
	{name: "method-trace", url: "https://127.0.0.1:{P}/", method: "trace", code: relayerr.InvalidArgs},
	{name: "upgrade-websocket", url: "https://127.0.0.1:{P}/", headers: hdr("Upgrade", "websocket"), code: relayerr.InvalidArgs},
	{name: "connection-upgrade", url: "https://127.0.0.1:{P}/", headers: hdr("Connection", "Upgrade"), code: relayerr.InvalidArgs},
	{name: "upgrade-h2c", url: "https://127.0.0.1:{P}/", headers: hdr("HTTP2-Settings", "AAMAAABkAAQAAP__"), code: relayerr.InvalidArgs},
	{name: "proxy-authorization", url: "https://127.0.0.1:{P}/", headers: hdr("Proxy-Authorization", "Basic eA=="), code: relayerr.InvalidArgs},
	{name: "transfer-encoding", url: "https://127.0.0.1:{P}/", headers: hdr("Transfer-Encoding", "chunked"), code: relayerr.InvalidArgs},
	{name: "content-length", url: "https://127.0.0.1:{P}/", headers: hdr("Content-Length", "5"), code: relayerr.InvalidArgs},
	{name: "crlf-in-value", url: "https://127.0.0.1:{P}/", headers: hdr("X-A", "b\r\nHost: 127.0.0.2"), code: relayerr.InvalidArgs},
	{name: "nul-in-value", url: "https://127.0.0.1:{P}/", headers: hdr("X-A", "b\x00c"), code: relayerr.InvalidArgs},
	{name: "colon-in-name", url: "https://127.0.0.1:{P}/", headers: hdr("X-A: b\r\nHost", "127.0.0.2"), code: relayerr.InvalidArgs},
}

// TestHostileRefusedBeforeAnyPacket is the allow-list battery: every case
// is refused with its code, and no connection reaches any listener of the
// fixture: not the stray, denied, other-node or unlisted addresses, and not
// the allowed targets either.
func TestHostileRefusedBeforeAnyPacket(t *testing.T) {
	if len(hostileCases) < 30 {
		t.Fatalf("%d hostile cases, want at least 30", len(hostileCases))
	}
	f := newFixture(t)
	p := f.proxy(t, nil)
	for _, c := range hostileCases {
		t.Run(c.name, func(t *testing.T) {
			node, code := c.node, c.code
			if node == "" {
				node = "node-a"
			}
			if code == "" {
				code = relayerr.ForbiddenTarget
			}
			before, conns := f.res.total(), f.counts(t)
			resp, err := p.Do(context.Background(), &sitev1.HttpProxyRequest{
				TargetNodeId: node, Url: f.u(c.url), Method: c.method,
				Headers: c.headers, SecretHeaders: c.secret, TimeoutMs: 2000,
			})
			if resp != nil {
				t.Errorf("resp = %v, want none", resp)
			}
			wantCode(t, err, code)
			t.Log(err)
			if got := f.res.total() - before; got != c.lookups {
				t.Errorf("%d lookups, want %d", got, c.lookups)
			}
			if diff := cmp.Diff(conns, f.counts(t)); diff != "" {
				t.Errorf("connections reached the fixture (-want +got):\n%s", diff)
			}
		})
	}
	if got := f.srv.seen(); len(got) != 0 {
		t.Errorf("target saw %d requests, want 0", len(got))
	}
}
