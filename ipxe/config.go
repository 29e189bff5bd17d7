package ipxe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/bootentry"
	"github.com/siteboot/siteboot/discovery"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/ratelimit"
)

// Entries looks up a machine's live entry (site.State).
type Entries interface {
	Lookup(mac string, now time.Time) (bootentry.Entry, bool)
}

// Gate is the boot lease gate (lease.Node).
type Gate interface {
	Gate() (epoch uint64, open bool)
}

// Discovery is the discovered-machine ledger (discovery.Ledger). A script
// request never adds a machine to it: Touch moves last_seen of a MAC the
// ledger holds from DHCP, and reports whether it held it.
type Discovery interface {
	Touch(mac string, at time.Time) bool
}

// Observed says what the DHCP proxy last saw from a MAC that has an entry
// (discovery.Observations): the assertion's product_uuid comes from it.
type Observed interface {
	LastSeen(mac string, now time.Time) (discovery.Observation, bool)
}

// Signer signs discovery assertions (discovery.Signer).
type Signer interface {
	SignAssertion(*sitev1.DiscoveryAssertion) (*sitev1.SignedDiscoveryAssertion, error)
}

// Secrets resolves secret refs (secretref.Resolver).
type Secrets interface {
	Resolve(ctx context.Context, ref string) ([]byte, error)
}

// Ramdisk is the site's ramdisk profile.
type Ramdisk struct {
	// Kernel and Initrd are each an http(s) URL or "sha256:<64 hex>", which
	// renders as <base URL>/cache/<hex> (served by the image cache).
	Kernel, Initrd string
	// Cmdline holds fixed kernel parameters, e.g. "console=ttyS0 quiet".
	// siteboot adds initrd= and the bc.* parameters itself.
	Cmdline string
}

// Defaults of Config.
const (
	DefaultAssertionTTL = time.Hour
	DefaultRetry        = 30 * time.Second
)

// maxTokenBytes bounds a resolved discovery token.
const maxTokenBytes = 1024

// Config configures a Server.
type Config struct {
	// SiteID is the site's id (bc.site_id, DiscoveryAssertion.site_id).
	SiteID string
	// NodeID is this appliance's node id (DiscoveryAssertion.site_agent_node_id).
	NodeID string
	// BaseURL is this appliance's URL as machines reach it, e.g.
	// "http://10.0.0.2:8080". Empty derives it per request from the
	// address the request arrived at (never from the Host header); Render,
	// which has no request, then fails.
	BaseURL string
	// Ramdisk is the ramdisk profile; entries without sanboot_sha256 or
	// ipxe_script_url need it.
	Ramdisk Ramdisk
	// AssertionTTL is how long a signed assertion (and the ramdisk script)
	// is valid, never past the entry's not_after (DefaultAssertionTTL if 0).
	AssertionTTL time.Duration
	// Retry is how long a script waits before it asks again after a failure
	// or as an unknown machine (DefaultRetry if 0).
	Retry time.Duration
	// Now is the clock (time.Now if nil).
	Now func() time.Time
	// Logger gets one line per request (discarded if nil).
	Logger *slog.Logger
	// Metrics registers siteboot_ipxe_scripts_total (nothing if nil).
	Metrics prometheus.Registerer

	Entries   Entries   // required
	Gate      Gate      // required
	Signer    Signer    // required
	Discovery Discovery // optional: no last_seen is moved if nil
	Observed  Observed  // optional: assertions of unpinned entries carry no product_uuid if nil
	Secrets   Secrets   // optional: entries with a discovery_token_ref fail if nil
}

// Server renders scripts and serves them over HTTP.
type Server struct {
	cfg        Config
	log        *slog.Logger
	base       string // checked cfg.BaseURL, "" when derived per request
	kernel     image
	initrd     image
	cmdline    string
	scripts    *prometheus.CounterVec
	unknown    *prometheus.CounterVec
	suppressed *prometheus.CounterVec
	logs       *ratelimit.Stages // lines a client causes, per remote address and stage
}

// image is a ramdisk file: a URL, or a digest served from the cache.
type image struct {
	url, digestHex string
}

func (i image) resolve(base string) string {
	if i.digestHex != "" {
		return base + "/cache/" + i.digestHex
	}
	return i.url
}

var idForm = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)

// New checks cfg and returns a Server. It binds nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Entries == nil || cfg.Gate == nil || cfg.Signer == nil {
		return nil, errors.New("ipxe: Config needs Entries, Gate and Signer")
	}
	if !idForm.MatchString(cfg.SiteID) || !idForm.MatchString(cfg.NodeID) {
		return nil, fmt.Errorf("ipxe: SiteID %q and NodeID %q must be 1-128 of letters, digits and . _ : @ -", cfg.SiteID, cfg.NodeID)
	}
	setDefaults(&cfg)
	s := &Server{cfg: cfg, log: cfg.Logger}
	s.logs = ratelimit.NewStages(func(stage string) { s.suppressed.WithLabelValues(stage).Inc() })
	if cfg.BaseURL != "" {
		base, err := checkBaseURL(cfg.BaseURL)
		if err != nil {
			return nil, fmt.Errorf("ipxe: BaseURL: %w", err)
		}
		s.base = base
	}
	if err := s.setRamdisk(cfg.Ramdisk); err != nil {
		return nil, err
	}
	if err := s.registerMetrics(cfg.Metrics); err != nil {
		return nil, err
	}
	return s, nil
}

func setDefaults(cfg *Config) {
	if cfg.AssertionTTL <= 0 {
		cfg.AssertionTTL = DefaultAssertionTTL
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
}

func (s *Server) setRamdisk(r Ramdisk) error {
	if r.Kernel == "" && r.Initrd == "" && r.Cmdline == "" {
		return nil
	}
	var err error
	if s.kernel, err = parseImage(r.Kernel); err != nil {
		return fmt.Errorf("ipxe: Ramdisk.Kernel: %w", err)
	}
	if s.initrd, err = parseImage(r.Initrd); err != nil {
		return fmt.Errorf("ipxe: Ramdisk.Initrd: %w", err)
	}
	if s.cmdline, err = checkCmdline(r.Cmdline); err != nil {
		return fmt.Errorf("ipxe: Ramdisk.Cmdline: %w", err)
	}
	return nil
}

var digestForm = regexp.MustCompile(`^[0-9a-f]{64}$`)

func parseImage(s string) (image, error) {
	if hexPart, ok := strings.CutPrefix(s, "sha256:"); ok {
		h := strings.ToLower(hexPart)
		if !digestForm.MatchString(h) {
			return image{}, fmt.Errorf("%q: want sha256:<64 hex digits>", s)
		}
		return image{digestHex: h}, nil
	}
	if err := bootentry.CheckScriptURL(s); err != nil {
		return image{}, fmt.Errorf("want an http(s) URL or sha256:<hex>: %w", err)
	}
	return image{url: s}, nil
}

func (s *Server) hasRamdisk() bool { return s.kernel != (image{}) }
