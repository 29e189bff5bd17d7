// Package httpproxy executes site.httpProxy (HttpProxyRequest): one HTTP
// request to an address of the target node the site spec lists, under the
// contract's rules, or forbidden-target before any packet is sent.
//
// CONTRACT SKELETON: the API below is fixed; the bodies are filled in by
// the Relays work (see RELAYS-PLAN.md while it is in progress).
package httpproxy

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
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
// multicast and broadcast addresses.
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
}

// Proxy executes HttpProxyRequests.
type Proxy struct{ cfg Config }

// New checks cfg and returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	if cfg.Targets == nil || cfg.Secrets == nil || cfg.Logger == nil {
		return nil, errors.New("httpproxy: Config.Targets, Config.Secrets and Config.Logger are required")
	}
	return &Proxy{cfg: cfg}, nil
}

// Do makes the request. Every failure is a *relayerr.Error.
func (p *Proxy) Do(ctx context.Context, req *sitev1.HttpProxyRequest) (*sitev1.HttpProxyResponse, error) {
	return nil, relayerr.New(relayerr.Unsupported, "not built yet")
}
