package dhcpproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/bootentry"
	"github.com/siteboot/siteboot/discovery"
)

// Entries finds the live boot entry of a MAC (lowercase colon form). It is
// called for every packet, so it should not allocate (site.State's
// doesn't).
type Entries interface {
	Lookup(mac string, now time.Time) (bootentry.Entry, bool)
}

// Gate reports whether this appliance holds the boot lease, and under which
// epoch. lease.Node satisfies it.
type Gate interface {
	Gate() (epoch uint64, open bool)
}

// Discovery receives the PXE and HTTP-boot clients that have no live entry
// (or whose request an entry's UUID pin refused). Record is called on the
// packet path: it must not block.
type Discovery interface {
	Record(discovery.Sighting)
}

// Observer receives what requests of machines with a live entry said
// (option 97's UUID above all), for the script renderer to put into
// assertions instead of what an HTTP query claims. Observe is called on the
// packet path: it must not block, and should not allocate.
type Observer interface {
	Observe(discovery.Sighting)
}

// BootFiles names the first-stage boot file for a base arch ("bios",
// "x86-efi", "x86_64-efi", "arm32-efi", "arm64-efi"); ok is false when
// there is none.
type BootFiles interface {
	BootFile(arch string) (name string, ok bool)
}

// Config configures a Server. Entries, Gate and BootFiles are required.
type Config struct {
	// Interfaces are the interfaces Listen opens sockets on; empty means
	// every up, non-loopback interface with an IPv4 address
	// (config key dhcp.interfaces).
	Interfaces []string
	// AdvertiseIP, when set, replaces the arrival interface's address in
	// siaddr, option 54, sname and derived HTTP URLs (dhcp.advertise_ip).
	AdvertiseIP net.IP
	// HTTPAdvertise is the base URL of siteboot's HTTP server put into boot
	// file and script URLs, e.g. "http://10.0.0.2:8080" (http.advertise).
	// Its host must be an IPv4 literal: UEFI HTTP boot resolves no names.
	// Empty derives "http://<server ip>:<HTTPPort>" per packet.
	HTTPAdvertise string
	// HTTPPort is the port of http.listen, used when HTTPAdvertise is
	// empty; 80 if zero.
	HTTPPort int
	// Relays are the DHCP relay addresses answered besides plausible
	// on-link relays (dhcp.relays): a relayed request is answered at its
	// giaddr only when giaddr lies in one of these IPv4 prefixes, or when
	// the relay is on the arrival subnet and sent the request itself,
	// unicast to this server. Empty trusts no relay beyond the link.
	Relays []netip.Prefix
	// Entries, Gate, Discovery, Observed and BootFiles are the
	// collaborators; a nil Discovery or Observed records nothing.
	Entries   Entries
	Gate      Gate
	Discovery Discovery
	Observed  Observer
	BootFiles BootFiles
	// Logger receives one line per decision; nil discards.
	Logger *slog.Logger
	// Registerer receives the siteboot_dhcp_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock entries are checked against; time.Now if nil.
	Now func() time.Time
}

// check validates cfg and fills in defaults.
func (cfg *Config) check() error {
	if cfg.Entries == nil || cfg.Gate == nil || cfg.BootFiles == nil {
		return errors.New("dhcpproxy: config needs Entries, Gate and BootFiles")
	}
	if cfg.AdvertiseIP != nil {
		ip4 := cfg.AdvertiseIP.To4()
		if ip4 == nil || !ip4.IsGlobalUnicast() {
			return fmt.Errorf("dhcpproxy: advertise ip %v is not a unicast IPv4 address", cfg.AdvertiseIP)
		}
		cfg.AdvertiseIP = ip4
	}
	cfg.Relays = slices.Clone(cfg.Relays)
	for i, p := range cfg.Relays {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("dhcpproxy: relay prefix %v is not an IPv4 prefix", p)
		}
		cfg.Relays[i] = p.Masked()
	}
	if cfg.HTTPPort == 0 {
		cfg.HTTPPort = 80
	}
	if cfg.HTTPPort < 1 || cfg.HTTPPort > 65535 {
		return fmt.Errorf("dhcpproxy: http port %d out of range", cfg.HTTPPort)
	}
	if cfg.HTTPAdvertise != "" {
		base, err := checkHTTPBase(cfg.HTTPAdvertise)
		if err != nil {
			return err
		}
		cfg.HTTPAdvertise = base
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return nil
}

// maxBaseLen leaves room for "/boot/<name>", with a name as long as an
// entry may hold, in the 127 usable bytes of the BOOTP file field.
const maxBaseLen = bootentry.MaxBootFileLen - len("/boot/") - bootentry.MaxBootFileNameLen

// checkHTTPBase accepts an absolute http(s) URL whose host is an IPv4
// literal, without credentials, query or fragment, and returns it without a
// trailing slash.
func checkHTTPBase(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("dhcpproxy: http advertise %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("dhcpproxy: http advertise %q: want an http:// or https:// URL", s)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || ip.To4() == nil {
		return "", fmt.Errorf("dhcpproxy: http advertise %q: host must be an IPv4 literal", s)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("dhcpproxy: http advertise %q: no credentials, query or fragment allowed", s)
	}
	base := strings.TrimRight(s, "/")
	if len(base) > maxBaseLen {
		return "", fmt.Errorf("dhcpproxy: http advertise %q: longer than %d bytes", s, maxBaseLen)
	}
	return base, nil
}
