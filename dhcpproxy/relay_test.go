package dhcpproxy

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

// withGiaddr sets giaddr and hops as a relay would (hops 1), or as a
// client that fills giaddr itself might (any hops).
func withGiaddr(ip string, hops uint8) dhcpv4.Modifier {
	return func(d *dhcpv4.DHCPv4) {
		d.GatewayIPAddr = net.ParseIP(ip).To4()
		d.HopCount = hops
		d.SetUnicast()
	}
}

func toRelay(ip string) func(*summary) {
	return func(s *summary) { s.Flags, s.GIAddr, s.To = 0, ip, ip+":67" }
}

// TestHandleRelayRules: a reply goes to giaddr only for a configured relay
// (dhcp.relays, here 10.1.0.0/24) or a plausible on-link one (on the
// arrival subnet 10.0.0.0/24, the packet's source, sent unicast to the
// server); never to a broadcast, network or own address.
func TestHandleRelayRules(t *testing.T) {
	disc := func(mods ...dhcpv4.Modifier) []byte {
		return pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, mods...)
	}
	runHandleCases(t, []handleCase{
		{name: "on-link relay sending as itself, unicast, is answered",
			pkt: disc(withGiaddr("10.0.0.77", 1)), in: unicast67("10.0.0.77", ServerPort),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi", toRelay("10.0.0.77"))}},
		{name: "un-relayed broadcast naming an on-link host as giaddr gets nothing",
			pkt: disc(withGiaddr("10.0.0.77", 1)), in: arrive67,
			want: outcome{Decision: "ignored:untrusted-relay"}},
		{name: "giaddr of an on-link host sent by another host gets nothing",
			pkt: disc(withGiaddr("10.0.0.77", 1)), in: unicast67("10.0.0.66", ServerPort),
			want: outcome{Decision: "ignored:untrusted-relay"}},
		{name: "on-link giaddr without pktinfo (destination unknown) gets nothing",
			pkt:  disc(withGiaddr("10.0.0.77", 1)),
			in:   func() Arrival { in := unicast67("10.0.0.77", ServerPort); in.Dst = netip.Addr{}; return in }(),
			want: outcome{Decision: "ignored:untrusted-relay"}},
		{name: "off-link giaddr not in dhcp.relays gets nothing",
			pkt: disc(withGiaddr("192.0.2.1", 1)), in: unicast67("192.0.2.1", ServerPort),
			want: outcome{Decision: "ignored:untrusted-relay"}},
		{name: "directed broadcast of the arrival subnet is never a destination",
			pkt: disc(withGiaddr("10.0.0.255", 1)), in: unicast67("10.0.0.255", ServerPort),
			want: outcome{Decision: "ignored:bad-giaddr"}},
		{name: "network address of the arrival subnet is never a destination",
			pkt: disc(withGiaddr("10.0.0.0", 1)), in: unicast67("10.0.0.0", ServerPort),
			want: outcome{Decision: "ignored:bad-giaddr"}},
		{name: "this server's own address is never a destination",
			pkt: disc(withGiaddr("10.0.0.2", 1)), in: unicast67("10.0.0.2", ServerPort),
			want: outcome{Decision: "ignored:bad-giaddr"}},
		{name: "configured relay is answered at giaddr, whatever address it sends from",
			pkt: disc(withGiaddr("10.1.0.1", 1)), in: unicast67("10.9.9.9", ServerPort),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi", toRelay("10.1.0.1"))}},
		{name: "directed broadcast of a dhcp.relays prefix is never a destination",
			pkt: disc(withGiaddr("10.1.0.255", 1)), in: unicast67("10.1.0.9", ServerPort),
			want: outcome{Decision: "ignored:bad-giaddr"}},
		{name: "hops 0 is no relay's",
			pkt: disc(withGiaddr("10.1.0.1", 0)), in: unicast67("10.1.0.1", ServerPort),
			want: outcome{Decision: "ignored:relay-hops"}},
		{name: "hops past 16 is refused",
			pkt: disc(withGiaddr("10.1.0.1", 17)), in: unicast67("10.1.0.1", ServerPort),
			want: outcome{Decision: "ignored:relay-hops"}},
		{name: "unknown MAC via an untrusted relay is not recorded",
			pkt: pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 7, withGiaddr("192.0.2.1", 1)), in: unicast67("192.0.2.1", ServerPort),
			want: outcome{Decision: "ignored:untrusted-relay"}},
	}, nil)
}

// TestHandleRelayInfoBounds: option 82 is echoed only to an accepted relay
// and only as a relay writes it: at most 255 bytes of sub-options.
func TestHandleRelayInfoBounds(t *testing.T) {
	opt82 := func(v []byte) dhcpv4.Modifier { return dhcpv4.WithGeneric(dhcpv4.OptionRelayAgentInformation, v) }
	circuit := []byte{1, 3, 'p', '1', '2', 2, 2, 0xab, 0xcd}
	big := bytes.Repeat([]byte{1, 8, 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x'}, 30) // 300 bytes
	relayed := unicast67("10.1.0.1", ServerPort)
	runHandleCases(t, []handleCase{
		{name: "well-formed option 82 is echoed to the relay",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, withGiaddr("10.1.0.1", 1), opt82(circuit)), in: relayed,
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi", toRelay("10.1.0.1"), func(s *summary) { s.Opt82 = "hex:0103703132" + "0202abcd" })}},
		{name: "option 82 of 255 bytes is echoed",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, withGiaddr("10.1.0.1", 1), opt82(append([]byte{9, 253}, make([]byte, 253)...))), in: relayed,
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi", toRelay("10.1.0.1"), func(s *summary) {
				s.Opt82 = "hex:09fd" + string(bytes.Repeat([]byte("00"), 253))
			})}},
		{name: "option 82 over 255 bytes (RFC 3396 concatenation) is refused",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, withGiaddr("10.1.0.1", 1), opt82(big)), in: relayed,
			want: outcome{Decision: "ignored:bad-option82"}},
		{name: "option 82 with a truncated sub-option is refused",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, withGiaddr("10.1.0.1", 1), opt82([]byte{1, 9, 'x'})), in: relayed,
			want: outcome{Decision: "ignored:bad-option82"}},
		{name: "option 82 is not echoed on 4011, where the reply goes to the client",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7, withGiaddr("10.1.0.1", 1), opt82(big)), in: arrive4011,
			want: outcome{Decision: "ack", Reply: offer("ipxe.efi", asACK, func(s *summary) {
				s.Flags, s.GIAddr, s.To = 0, "10.1.0.1", "10.0.0.50:1025"
			})}},
		{name: "option 82 without giaddr is not echoed",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, opt82(circuit)),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi")}},
	}, nil)
}

// TestHandleClientAddressRules: ciaddr gets a unicast reply only when it is
// a host address of the arrival subnet and the packet came from it;
// otherwise the reply is broadcast on the link.
func TestHandleClientAddressRules(t *testing.T) {
	req := func(ciaddr net.IP) []byte {
		return pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7, dhcpv4.WithClientIP(ciaddr), dhcpv4.WithBroadcast(false))
	}
	ack := func(ci, to string) *summary {
		return offer("ipxe.efi", asACK, func(s *summary) { s.Flags, s.CIAddr, s.To = 0, ci, to })
	}
	runHandleCases(t, []handleCase{
		{name: "from ciaddr on the subnet: unicast",
			pkt: req(net.IPv4(10, 0, 0, 77)), in: unicast67("10.0.0.77", ClientPort),
			want: outcome{Decision: "ack", Reply: ack("10.0.0.77", "10.0.0.77:68")}},
		{name: "ciaddr off the arrival subnet: broadcast",
			pkt: req(net.IPv4(192, 0, 2, 5)), in: unicast67("192.0.2.5", ClientPort),
			want: outcome{Decision: "ack", Reply: ack("192.0.2.5", "255.255.255.255:68")}},
		{name: "ciaddr the subnet's directed broadcast: broadcast",
			pkt: req(net.IPv4(10, 0, 0, 255)), in: unicast67("10.0.0.255", ClientPort),
			want: outcome{Decision: "ack", Reply: ack("10.0.0.255", "255.255.255.255:68")}},
		{name: "ciaddr not the packet's source: broadcast",
			pkt: req(net.IPv4(10, 0, 0, 77)), in: arrive67,
			want: outcome{Decision: "ack", Reply: ack("10.0.0.77", "255.255.255.255:68")}},
		{name: "4011 request from the subnet's directed broadcast address is ignored",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7),
			in: func() Arrival {
				in := arrive4011
				in.Source = &net.UDPAddr{IP: net.IPv4(10, 0, 0, 255), Port: 68}
				return in
			}(),
			want: outcome{Decision: "ignored:bad-source"}},
	}, nil)
}

func TestCheckRelayInfo(t *testing.T) {
	got := map[string]bool{}
	for name, v := range map[string][]byte{
		"empty": {}, "one sub-option": {1, 1, 'a'}, "two": {1, 1, 'a', 2, 0}, "no length": {1},
		"length past the end": {1, 2, 'a'}, "255 bytes": append([]byte{1, 253}, make([]byte, 253)...),
		"256 bytes": append([]byte{1, 253}, make([]byte, 254)...),
	} {
		got[name] = checkRelayInfo(v)
	}
	want := map[string]bool{"empty": false, "one sub-option": true, "two": true, "no length": false,
		"length past the end": false, "255 bytes": true, "256 bytes": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("checkRelayInfo (-want +got):\n%s", diff)
	}
}
