package appliance

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/siteboot/siteboot/bmc"
	"github.com/siteboot/siteboot/httpproxy"
)

// MaxProxyResponseBytes bounds httpproxy.max_response_bytes: the response
// travels back in one admin API message (4 MiB), headers included.
const MaxProxyResponseBytes = 3 << 20

// maxRelayConcurrency bounds bmc.max_operations and httpproxy.max_requests.
const maxRelayConcurrency = 1024

// ParsePrefixes reads a list of CIDRs, a bare address meaning a single
// host (/32 or /128), IPv4 or IPv6. Zones, IPv4-mapped IPv6 and the
// prefixes of length 0 (every address) are refused.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil || a.Zone() != "" {
				return nil, fmt.Errorf("%q is not a CIDR or an IP address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		switch {
		case p.Addr().Is4In6():
			return nil, fmt.Errorf("%q is IPv4-mapped IPv6: write the IPv4 form", s)
		case p.Bits() == 0:
			return nil, fmt.Errorf("%q is every address: list the networks themselves", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// checkRelays checks bmc.* and httpproxy.*.
func (c *Config) checkRelays() []keyError {
	var errs []keyError
	bad := func(key, format string, args ...any) {
		errs = append(errs, keyError{key: key, reason: fmt.Sprintf(format, args...)})
	}
	if _, err := ParsePrefixes(c.BMC.Networks); err != nil {
		bad("bmc.networks", "%v", err)
	}
	if t := time.Duration(c.BMC.Timeout); t < time.Second || t > bmc.MaxTimeout {
		bad("bmc.timeout", "%s: want 1s..%s", t, bmc.MaxTimeout)
	}
	if n := c.BMC.MaxOperations; n < 1 || n > maxRelayConcurrency {
		bad("bmc.max_operations", "%d: want 1..%d", n, maxRelayConcurrency)
	}
	if c.BMC.Ipmitool == "" {
		bad("bmc.ipmitool", "is empty: name the ipmitool binary (ipmitool finds it on PATH)")
	}
	if _, err := ParsePrefixes(c.HTTPProxy.ProvisioningNetworks); err != nil {
		bad("httpproxy.provisioning_networks", "%v", err)
	}
	if n, err := parseSize(c.HTTPProxy.MaxResponseBytes); err != nil {
		bad("httpproxy.max_response_bytes", "%v", err)
	} else if n < 1 || n > MaxProxyResponseBytes {
		bad("httpproxy.max_response_bytes", "%q: want 1 byte to 3MiB (the response is one admin API message)", c.HTTPProxy.MaxResponseBytes)
	}
	if t := time.Duration(c.HTTPProxy.Timeout); t < time.Second || t > httpproxy.MaxTimeout {
		bad("httpproxy.timeout", "%s: want 1s..%s", t, httpproxy.MaxTimeout)
	}
	if n := c.HTTPProxy.MaxRequests; n < 1 || n > maxRelayConcurrency {
		bad("httpproxy.max_requests", "%d: want 1..%d", n, maxRelayConcurrency)
	}
	return errs
}

// BMCConfig is the BMC relay's configuration from bmc.*, without the
// parts the appliance injects (Secrets, Logger, Registerer). It must have
// passed Finish.
func (c *Config) BMCConfig() bmc.Config {
	networks, _ := ParsePrefixes(c.BMC.Networks) // checked by check
	return bmc.Config{
		Networks: networks, Timeout: time.Duration(c.BMC.Timeout),
		MaxOperations: c.BMC.MaxOperations, Ipmitool: c.BMC.Ipmitool,
	}
}

// HTTPProxyConfig is the httpProxy relay's configuration from httpproxy.*
// and bmc.networks, without the parts the appliance injects (Targets,
// Secrets, Logger, Registerer). It must have passed Finish.
//
// Whatever the site spec lists, a proxy target is never a BMC, a loopback,
// link-local, multicast or unspecified address (httpproxy.DefaultDeny), nor
// an address of this appliance's own interfaces (DenyLocal): the spec is
// written by the control plane, and httpProxy must not become its way to
// the BMC network or to the appliance itself.
func (c *Config) HTTPProxyConfig() httpproxy.Config {
	prov, _ := ParsePrefixes(c.HTTPProxy.ProvisioningNetworks) // checked by check
	bmcs, _ := ParsePrefixes(c.BMC.Networks)
	maxBody, _ := parseSize(c.HTTPProxy.MaxResponseBytes)
	return httpproxy.Config{
		ProvisioningNetworks: prov,
		// A new slice: DefaultDeny is shared and must never be appended to.
		Deny:             slices.Concat(httpproxy.DefaultDeny, bmcs),
		DenyLocal:        true,
		MaxResponseBytes: maxBody, Timeout: time.Duration(c.HTTPProxy.Timeout), MaxRequests: c.HTTPProxy.MaxRequests,
	}
}
