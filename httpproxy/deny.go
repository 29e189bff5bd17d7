package httpproxy

import (
	"net"
	"net/netip"

	"github.com/siteboot/siteboot/internal/relayerr"
)

// checkIPs applies checkIP to every address: one refused address refuses
// the request (a name with a mix of allowed and refused answers is
// refused as a whole).
func (p *Proxy) checkIPs(ips []netip.Addr, https bool) error {
	var local []netip.Addr
	if p.cfg.DenyLocal {
		var err error
		if local, err = p.localAddrs(); err != nil {
			return err
		}
	}
	for _, ip := range ips {
		if err := p.checkIP(ip, https, local); err != nil {
			return err
		}
	}
	return nil
}

// checkIP refuses ip when it is in a denied range, is one of the
// appliance's own addresses, or is asked for over plain http outside the
// provisioning networks. Unspecified and multicast addresses are refused
// whatever Config.Deny says: they are never one machine's API endpoint.
func (p *Proxy) checkIP(ip netip.Addr, https bool, local []netip.Addr) error {
	if ip.IsUnspecified() || ip.IsMulticast() {
		return forbidden("%s is not a unicast address", ip)
	}
	for _, d := range p.cfg.Deny {
		if d.Contains(ip) {
			return forbidden("%s is in the denied range %s", ip, d)
		}
	}
	for _, l := range local {
		if l == ip {
			return forbidden("%s is an address of this appliance", ip)
		}
	}
	if !https && !inAny(p.cfg.ProvisioningNetworks, ip) {
		return forbidden("http:// to %s: plain http only inside httpproxy.provisioning_networks, https elsewhere", ip)
	}
	return nil
}

func inAny(nets []netip.Prefix, ip netip.Addr) bool {
	for _, n := range nets {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// interfaceAddrs lists the addresses of the appliance's interfaces, read
// at each request (addresses change). A failure to list them refuses the
// request rather than skipping the check.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, relayerr.New(relayerr.Internal, "list local addresses for deny_local: %v", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if nip, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, nip.Unmap())
		}
	}
	return out, nil
}
