// Package httpproxy executes site.httpProxy (the reference's
// HttpProxyRequest, site.proto): one HTTP request, made by the appliance
// on the control plane's behalf, to an address of the target node that the
// site spec lists in proxy_targets, and nowhere else.
//
// The allow-list is checked before any packet is sent; every refusal of
// the target is forbidden-target, other failures carry the relayerr codes:
//
//   - The URL is read strictly: printable ASCII only (no space: net/http
//     would write a raw one of the query into the request line), scheme
//     http or https (any case), a //host, no user info, no fragment, no percent escapes or zone ids in
//     the host, the port (when given) 1..65535 in plain decimal ("host:",
//     ":0", ":+443", ":0443" are refused). Any URL that is not exactly one
//     allowed host is forbidden-target, an unparsable one included.
//   - An IP literal is compared as an IP with the node's IP-literal
//     addresses, IPv4-mapped IPv6 unmapped first (so [::ffff:10.0.0.5] is
//     10.0.0.5; IPv4-compatible ::10.0.0.5 is an IPv6 address of its own).
//     Other IPv4 spellings (2130706433, 0x7f000001, 127.1, 0177.0.0.1) are
//     neither IP literals nor DNS names (no top-level label starts with a
//     digit) and are refused: nothing ever reaches a resolver that might
//     read them as an address.
//   - A name is lower-cased, one trailing dot dropped, and must equal one
//     of the node's name addresses. It is then resolved once, and the
//     strict reading of "compared by name and then by every resolved IP"
//     applies: every address it resolves to must be an IP literal the same
//     node lists. A name entry alone admits no address; the site spec lists
//     a node's names and its IPs. A name whose answers are partly allowed
//     is refused as a whole.
//   - Every such address must be outside Config.Deny (DefaultDeny unless
//     set), must not be an address of the appliance's own interfaces (with
//     DenyLocal), must be unicast, and plain http is allowed only to an
//     address inside ProvisioningNetworks.
//
// The checked IP is what is dialled, never the name again: each request
// gets its own Transport whose dialer accepts only the URL's host:port,
// re-checks the IP, dials it once, and refuses in the socket's Control
// hook a connect to anything else. No proxy from the environment, no
// pooled connection (DisableKeepAlives, a Transport per request), HTTP/1.1
// only (no h2 in ALPN), no transparent gzip, no redirects (the Transport's
// RoundTrip is used directly: a 3xx comes back as the response it is).
//
// TLS: with tls_spki_sha256 the pin replaces chain and name verification
// (nodes such as Talos use their own CA); the leaf certificate's
// SubjectPublicKeyInfo must hash to it, else pin-mismatch. Without a pin
// the chain is verified against Config.RootCAs (system roots when nil) and
// the certificate must name the URL host: the DNS name, or for an IP
// literal that IP as an IP SAN (no SNI is sent for an IP).
//
// Requests: methods GET, HEAD, POST, PUT, PATCH, DELETE (any case);
// CONNECT, TRACE, OPTIONS and others are invalid-args. Header names must be
// tokens of at most 256 bytes and values free of control bytes; Host, Connection, Keep-Alive,
// TE, Trailer, Transfer-Encoding, Content-Length, Upgrade, HTTP2-Settings,
// Expect and Proxy-* are the proxy's and refused (invalid-args). The Host
// header is the URL's host. secret_headers values are refs read through
// Config.Secrets (credentials-unavailable when unreadable); a trailing
// newline of the secret is dropped.
//
// Responses: status, every header (Set-Cookie included: the caller is the
// control plane that asked), and the body up to MaxResponseBytes with
// truncated set when there was more; reading stops at the cap, so a
// never-ending body costs at most the cap. A deadline that passes before
// the body ended is timeout, not a partial response. A 101 Switching
// Protocols is refused (unreachable): the proxy asks for no upgrade. A
// response that holds a secret header's value verbatim (a target
// reflecting the request) is withheld as internal: the caller named a
// ref, not the value.
//
// Never logged, returned in an error, or put in a metric: a header value
// (plain or secret), the URL's user info or query. One log line per
// request names the node, method, redacted URL, header names, the dialled
// IP and the outcome.
package httpproxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
)

// Secrets reads secret references (secretref.Resolver in the appliance).
type Secrets interface {
	Resolve(ctx context.Context, ref string) ([]byte, error)
	Check(ref string) error
}

// Targets gives the site spec whose proxy_targets are the allow-list
// (*site.State in the appliance).
type Targets interface {
	Spec() *sitev1.SiteSpec
}

// Resolver resolves a name to addresses (net.DefaultResolver in the
// appliance; tests inject one whose answers change).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Defaults.
const (
	DefaultMaxResponseBytes = 1 << 20
	DefaultTimeout          = 30 * time.Second
	MaxTimeout              = 5 * time.Minute
	DefaultMaxRequests      = 16
)

// DefaultDeny is what no proxy target may be, whatever the site spec
// lists: loopback, link-local (cloud metadata included), unspecified,
// multicast and broadcast addresses, and the cloud metadata services
// outside link-local (AWS's IPv6 fd00:ec2::254, Alibaba's 100.100.100.200).
var DefaultDeny = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("255.255.255.255/32"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("100.100.100.200/32"),
}

// Config configures a Proxy.
type Config struct {
	// Targets is the allow-list.
	Targets Targets
	// ProvisioningNetworks are where plain http is allowed
	// (httpproxy.provisioning_networks); elsewhere https only.
	ProvisioningNetworks []netip.Prefix
	// Deny are ranges refused even when a target lists them: DefaultDeny
	// plus bmc.networks in the appliance (a target is never a BMC). Nil
	// means DefaultDeny; tests on loopback pass an explicit list.
	Deny []netip.Prefix
	// DenyLocal refuses the appliance's own interface addresses.
	DenyLocal bool
	// MaxResponseBytes caps the body returned (0: DefaultMaxResponseBytes).
	MaxResponseBytes int64
	// Timeout applies when a request has no timeout_ms (0: DefaultTimeout);
	// a longer timeout_ms than MaxTimeout is invalid-args.
	Timeout time.Duration
	// MaxRequests bounds requests at once (0: DefaultMaxRequests); more are
	// refused with busy.
	MaxRequests int
	// Resolver resolves names once per request (nil: net.DefaultResolver).
	Resolver Resolver
	// Secrets reads secret_headers values.
	Secrets Secrets
	// Logger gets one line per request, never a secret.
	Logger *slog.Logger
	// Registerer registers siteboot_httpproxy_* (nothing if nil).
	Registerer prometheus.Registerer
	// RootCAs verify targets' certificates when a request has no pin
	// (nil: the system roots).
	RootCAs *x509.CertPool
}

// Proxy executes HttpProxyRequests.
type Proxy struct {
	cfg        Config
	sem        chan struct{}
	metrics    *metrics
	localAddrs func() ([]netip.Addr, error)
}

// New checks cfg, fills in its defaults and returns a Proxy. It binds and
// sends nothing.
func New(cfg Config) (*Proxy, error) {
	if cfg.Targets == nil || cfg.Secrets == nil || cfg.Logger == nil {
		return nil, errors.New("httpproxy: Config.Targets, Config.Secrets and Config.Logger are required")
	}
	switch {
	case cfg.MaxResponseBytes < 0:
		return nil, fmt.Errorf("httpproxy: MaxResponseBytes %d is negative", cfg.MaxResponseBytes)
	case cfg.Timeout < 0 || cfg.Timeout > MaxTimeout:
		return nil, fmt.Errorf("httpproxy: Timeout %v is not in 0..%v", cfg.Timeout, MaxTimeout)
	case cfg.MaxRequests < 0:
		return nil, fmt.Errorf("httpproxy: MaxRequests %d is negative", cfg.MaxRequests)
	}
	if cfg.MaxResponseBytes == 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	if cfg.Deny == nil {
		cfg.Deny = append([]netip.Prefix(nil), DefaultDeny...)
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Proxy{cfg: cfg, sem: make(chan struct{}, cfg.MaxRequests), metrics: m, localAddrs: interfaceAddrs}, nil
}
