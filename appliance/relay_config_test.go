package appliance

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/bmc"
	"github.com/siteboot/siteboot/httpproxy"
)

var cmpPrefix = cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })

func finished(t *testing.T, set func(*Config)) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir, cfg.NodeID = t.TempDir(), "n1"
	set(&cfg)
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes([]string{"10.20.0.0/24", "10.21.0.5", "10.22.3.4/16", "fd00:b3c::/48", "fd00::7"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.20.0.0/24"), netip.MustParsePrefix("10.21.0.5/32"), netip.MustParsePrefix("10.22.0.0/16"),
		netip.MustParsePrefix("fd00:b3c::/48"), netip.MustParsePrefix("fd00::7/128"),
	}
	if diff := cmp.Diff(want, got, cmpPrefix); diff != "" {
		t.Errorf("ParsePrefixes (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"", "bmc-net", "10.0.0.0/33", "0.0.0.0/0", "::/0", "fe80::1%eth0", "::ffff:10.0.0.1", "010.0.0.1", "10.0.0.1/24/2"} {
		if got, err := ParsePrefixes([]string{"10.0.0.0/8", bad}); err == nil {
			t.Errorf("ParsePrefixes(%q) = %v, want an error", bad, got)
		}
	}
}

// The defaults are the relays' own and the contract's: no BMC network (every
// BMC operation refused), DefaultDeny and local addresses denied to httpProxy.
func TestRelayConfigDefaults(t *testing.T) {
	cfg := finished(t, func(*Config) {})
	b := cfg.BMCConfig()
	if len(b.Networks) != 0 || b.Timeout != bmc.DefaultTimeout || b.MaxOperations != bmc.DefaultMaxOperations || b.Ipmitool != "ipmitool" {
		t.Errorf("BMCConfig() = %+v", b)
	}
	p := cfg.HTTPProxyConfig()
	if p.MaxResponseBytes != 1<<20 || p.Timeout != 30*time.Second || p.MaxRequests != httpproxy.DefaultMaxRequests ||
		!p.DenyLocal || len(p.ProvisioningNetworks) != 0 {
		t.Errorf("HTTPProxyConfig() = %+v", p)
	}
	if diff := cmp.Diff(httpproxy.DefaultDeny, p.Deny, cmpPrefix); diff != "" {
		t.Errorf("Deny without bmc.networks (-DefaultDeny +got):\n%s", diff)
	}
}

// httpProxy never reaches a BMC: Deny is DefaultDeny and bmc.networks, in a
// slice of its own (DefaultDeny is shared by every Proxy).
func TestHTTPProxyDeniesTheBMCNetworks(t *testing.T) {
	before := slices.Clone(httpproxy.DefaultDeny)
	one := finished(t, func(c *Config) {
		c.BMC.Networks = []string{"10.20.0.0/24", "10.21.0.5"}
		c.HTTPProxy.ProvisioningNetworks = []string{"10.0.0.0/24"}
		c.HTTPProxy.MaxResponseBytes = "64KiB"
		c.HTTPProxy.Timeout = Duration(time.Minute)
	})
	p := one.HTTPProxyConfig()
	second := finished(t, func(c *Config) { c.BMC.Networks = []string{"192.0.2.0/24"} })
	other := second.HTTPProxyConfig()

	want := append(slices.Clone(before), netip.MustParsePrefix("10.20.0.0/24"), netip.MustParsePrefix("10.21.0.5/32"))
	if diff := cmp.Diff(want, p.Deny, cmpPrefix); diff != "" {
		t.Errorf("Deny (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, httpproxy.DefaultDeny, cmpPrefix); diff != "" {
		t.Errorf("DefaultDeny changed (-before +after):\n%s", diff)
	}
	if other.Deny[len(other.Deny)-1] != netip.MustParsePrefix("192.0.2.0/24") || p.Deny[len(p.Deny)-1] != netip.MustParsePrefix("10.21.0.5/32") {
		t.Errorf("two configs share their Deny: %v and %v", p.Deny, other.Deny)
	}
	if !p.DenyLocal || p.MaxResponseBytes != 64<<10 || p.Timeout != time.Minute {
		t.Errorf("HTTPProxyConfig() = %+v", p)
	}
	if diff := cmp.Diff([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}, p.ProvisioningNetworks, cmpPrefix); diff != "" {
		t.Errorf("ProvisioningNetworks (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]netip.Prefix{netip.MustParsePrefix("10.20.0.0/24"), netip.MustParsePrefix("10.21.0.5/32")}, one.BMCConfig().Networks, cmpPrefix); diff != "" {
		t.Errorf("BMCConfig().Networks (-want +got):\n%s", diff)
	}
}
