package dhcpproxy

import (
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/siteboot/siteboot/internal/ipv4host"
)

// maxHops is the largest hops count a relayed request may carry: RFC 1542
// §4.1.1 has relay agents discard requests past a configurable maximum of
// at most 16.
const maxHops = 16

// maxRelayInfo is the most option 82 may hold: one option of sub-options
// (RFC 3046 §2.0), so at most 255 bytes. A longer value (several option
// 82s concatenated, RFC 3396) was not written by a relay.
const maxRelayInfo = 255

// Reasons a relayed request is refused (the decision's "ignored:<reason>").
const (
	reasonBadGiaddr     = "bad-giaddr"      // never a destination: broadcast, network, loopback, ours…
	reasonRelayHops     = "relay-hops"      // hops 0 or past maxHops
	reasonUntrusted     = "untrusted-relay" // neither in dhcp.relays nor a plausible on-link relay
	reasonBadRelayInfo  = "bad-option82"    // option 82 too long or not a list of sub-options
	reasonBadSourceAddr = "bad-source"
)

// relayVerdict is what checkRelay found about a relayed request.
type relayVerdict struct {
	relay      netip.Addr // the relay the reply goes to (giaddr); zero when refused
	configured bool       // giaddr lies in Config.Relays
	reason     string     // why it is refused; "" when it is not
}

// checkRelay decides whether a request that arrived on UDP 67 with giaddr
// g set may be answered at g:67. A relayed request comes unicast from its
// relay (RFC 1542 §4.1.1: giaddr is the relay's address, hops at least 1),
// so g must be:
//   - a host address: not unspecified, loopback, multicast, the limited
//     broadcast, this server's own, nor the network or directed-broadcast
//     address of the arrival subnet or of the dhcp.relays prefix it is in;
//   - and either inside a dhcp.relays prefix, or a plausible on-link relay:
//     inside the arrival interface's subnet, the packet's source address,
//     and the packet addressed to this server (unicast, not broadcast).
//
// Everything else is a client (or someone) naming a destination, and gets
// nothing.
func (s *Server) checkRelay(req *dhcpv4.DHCPv4, g netip.Addr, in Arrival) relayVerdict {
	if !hostAddr(g, in.Net) || g == addrOf(in.ServerIP) || g == addrOf(s.cfg.AdvertiseIP) {
		return relayVerdict{reason: reasonBadGiaddr}
	}
	if req.HopCount < 1 || req.HopCount > maxHops {
		return relayVerdict{reason: reasonRelayHops}
	}
	for _, p := range s.cfg.Relays {
		if p.Contains(g) {
			if !hostAddr(g, p) {
				return relayVerdict{reason: reasonBadGiaddr}
			}
			return relayVerdict{relay: g, configured: true}
		}
	}
	src := sourceAddr(in)
	if in.Net.IsValid() && in.Net.Contains(g) && src == g && in.Dst.IsValid() && in.Dst == addrOf(in.ServerIP) {
		return relayVerdict{relay: g}
	}
	return relayVerdict{reason: reasonUntrusted}
}

// checkRelayInfo reports whether option 82 of a relayed request is one a
// relay wrote: 1-255 bytes of well-formed sub-options (code, length,
// value). It is echoed only then.
func checkRelayInfo(v []byte) bool {
	if len(v) == 0 || len(v) > maxRelayInfo {
		return false
	}
	for len(v) > 0 {
		if len(v) < 2 || 2+int(v[1]) > len(v) {
			return false
		}
		v = v[2+int(v[1]):]
	}
	return true
}

// hostAddr reports whether a may be sent a reply: an IPv4 host address
// (ipv4host.Is: not unspecified, multicast, the limited broadcast, nor
// net's network or directed broadcast) that is not loopback.
func hostAddr(a netip.Addr, net netip.Prefix) bool {
	return !a.IsLoopback() && ipv4host.Is(a, net)
}

// addrOf converts an IPv4 net.IP; the zero Addr for nil or non-IPv4.
func addrOf(ip net.IP) netip.Addr {
	ip4 := ip.To4()
	if ip4 == nil {
		return netip.Addr{}
	}
	return netip.AddrFrom4([4]byte(ip4))
}

// sourceAddr is the packet's source address; the zero Addr when unknown.
func sourceAddr(in Arrival) netip.Addr {
	if in.Source == nil {
		return netip.Addr{}
	}
	return addrOf(in.Source.IP)
}
