package bmc

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/siteboot/siteboot/internal/relayerr"
)

// Resolver resolves a BMC name to addresses (net.DefaultResolver when
// Config.Resolver is nil; tests inject one).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// address is a parsed BMC address: a host (IP literal or name) and a port
// (0: none given).
type address struct {
	host string
	ip   netip.Addr // valid when host is an IP literal
	port int
}

// parseAddress reads ipmi's HOST or HOST:PORT, or redfish's HOST,
// HOST:PORT or https://HOST[:PORT]. IPv6 literals with a port are
// bracketed; zones are refused.
func parseAddress(driver, s string) (address, error) {
	var a address
	if s == "" {
		return a, relayerr.New(relayerr.InvalidArgs, "address is empty")
	}
	if len(s) > 300 || strings.ContainsFunc(s, func(r rune) bool { return r <= 0x20 || r == 0x7f }) {
		return a, relayerr.New(relayerr.InvalidArgs, "address is not a host or host:port")
	}
	hostport := s
	if i := strings.Index(s, "://"); i >= 0 {
		scheme := strings.ToLower(s[:i])
		if driver != driverRedfish || scheme != "https" {
			return a, relayerr.New(relayerr.InvalidArgs, "address: only redfish takes a URL, and only https://")
		}
		u, err := url.Parse(s)
		if err != nil || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return a, relayerr.New(relayerr.InvalidArgs, "address: a URL must be https://HOST[:PORT] and nothing more")
		}
		hostport = u.Host
	}
	if _, err := netip.ParseAddr(hostport); err == nil {
		a.host = hostport
	} else if h, p, err := net.SplitHostPort(hostport); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
			return a, relayerr.New(relayerr.InvalidArgs, "address: port must be 1..65535")
		}
		a.host, a.port = h, n
	} else {
		a.host = hostport
	}
	return a, a.checkHost()
}

func (a *address) checkHost() error {
	if ip, err := netip.ParseAddr(a.host); err == nil {
		if ip.Zone() != "" {
			return relayerr.New(relayerr.InvalidArgs, "address: IPv6 zones are not allowed")
		}
		a.ip = ip.Unmap()
		return nil
	}
	if !validName(a.host) {
		return relayerr.New(relayerr.InvalidArgs, "address: host is neither an IP address nor a DNS name")
	}
	a.host = strings.TrimSuffix(strings.ToLower(a.host), ".")
	return nil
}

// validName accepts letters, digits and hyphens in dot-separated labels of
// 1..63 bytes, up to 253 bytes, and refuses all-numeric names (they would
// be odd IPv4 spellings like 2130706433 or 0x7f.1).
func validName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(strings.ToLower(last), "0x") {
		return false
	}
	return true
}

// resolve returns the IP to dial: the literal, or every address the name
// resolves to once, all of which must be inside networks (the first is
// used). Nothing is sent for a literal outside networks.
func (r *Relay) resolve(ctx context.Context, a address) (netip.Addr, error) {
	if len(r.cfg.Networks) == 0 {
		return netip.Addr{}, relayerr.New(relayerr.ForbiddenTarget, "bmc.networks is empty: no BMC operation is allowed")
	}
	if a.ip.IsValid() {
		if !r.allowed(a.ip) {
			return netip.Addr{}, relayerr.New(relayerr.ForbiddenTarget, "address %s is not inside bmc.networks", a.ip)
		}
		return a.ip, nil
	}
	ips, err := r.resolver.LookupNetIP(ctx, "ip", a.host)
	if err != nil || len(ips) == 0 {
		if ctx.Err() != nil {
			return netip.Addr{}, relayerr.New(relayerr.Timeout, "resolving %s: deadline passed", a.host)
		}
		return netip.Addr{}, relayerr.New(relayerr.Unreachable, "%s does not resolve", a.host)
	}
	for _, ip := range ips {
		if ip = ip.Unmap(); ip.Zone() != "" || !r.allowed(ip) {
			return netip.Addr{}, relayerr.New(relayerr.ForbiddenTarget, "%s resolves to %s, which is not inside bmc.networks", a.host, ip)
		}
	}
	return ips[0].Unmap(), nil
}

func (r *Relay) allowed(ip netip.Addr) bool {
	for _, p := range r.cfg.Networks {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// hostLiteral is ip as a host for bmclib: IPv6 in brackets, so that
// bmclib's host+":"+port splits again.
func hostLiteral(ip netip.Addr) string {
	if ip.Is6() {
		return "[" + ip.String() + "]"
	}
	return ip.String()
}

func (a address) String() string { return a.host }
