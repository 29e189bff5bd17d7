// Package ipv4host tells a host's IPv4 address from the addresses that
// reach more than one host: a UDP server that answers a request's source
// must not answer one of those, or every host of the link gets the
// answer, and a stranger there who forged the source sees it too.
package ipv4host

import "net/netip"

// LimitedBroadcast is 255.255.255.255.
var LimitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// Is reports whether a is an IPv4 address of one host: not unspecified,
// multicast or the limited broadcast, and, when net is valid, holds a and
// has more than two addresses (a /31 or /32 has no network or broadcast
// address), neither net's network address nor its directed broadcast.
// Loopback addresses are hosts here; a caller that must refuse them says
// so.
func Is(a netip.Addr, net netip.Prefix) bool {
	if !a.Is4() || a.IsUnspecified() || a.IsMulticast() || a == LimitedBroadcast {
		return false
	}
	if !net.IsValid() || !net.Addr().Is4() || net.Bits() > 30 || !net.Contains(a) {
		return true
	}
	return a != net.Masked().Addr() && a != Broadcast(net)
}

// Broadcast is the highest address of the IPv4 prefix p, its directed
// broadcast.
func Broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return netip.AddrFrom4(b)
}
