package dhcpproxy

import (
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Well-known ports (RFC 2131 §4.1; PXE 2.1 boot server discovery).
const (
	ServerPort = 67   // DHCP server port, where proxy offers are asked for
	ClientPort = 68   // DHCP client port, where broadcast replies go
	PXEPort    = 4011 // PXE boot server port, asked by unicast
)

// pxeDiscoveryControl returns option 43 with PXE sub-option 6 (discovery
// control) = 0x08, "the boot file is in this offer: download it, no boot
// server discovery", then the encapsulated End.
func pxeDiscoveryControl() []byte { return []byte{6, 1, 0x08, 255} }

// buildReply encodes the OFFER or ACK for req.
func buildReply(req *dhcpv4.DHCPv4, c *client, mt dhcpv4.MessageType, serverIP net.IP, file string) []byte {
	r := &dhcpv4.DHCPv4{
		OpCode:         dhcpv4.OpcodeBootReply,
		HWType:         req.HWType,
		TransactionID:  req.TransactionID,
		Flags:          req.Flags,
		ClientIPAddr:   net.IPv4zero,
		YourIPAddr:     net.IPv4zero,
		ServerIPAddr:   serverIP,
		GatewayIPAddr:  req.GatewayIPAddr,
		ClientHWAddr:   req.ClientHWAddr,
		ServerHostName: serverIP.String(),
		BootFileName:   file,
		Options:        make(dhcpv4.Options, 8),
	}
	if mt == dhcpv4.MessageTypeAck {
		r.ClientIPAddr = req.ClientIPAddr
	}
	o := r.Options
	o[dhcpv4.OptionDHCPMessageType.Code()] = []byte{byte(mt)}
	o[dhcpv4.OptionServerIdentifier.Code()] = serverIP
	o[dhcpv4.OptionClassIdentifier.Code()] = []byte(c.class)
	o[dhcpv4.OptionBootfileName.Code()] = []byte(file)
	if c.class == classPXE {
		o[dhcpv4.OptionVendorSpecificInformation.Code()] = pxeDiscoveryControl()
	}
	if c.echoUUID {
		o[dhcpv4.OptionClientMachineIdentifier.Code()] = c.uuidOpt
	}
	if ri, ok := req.Options[dhcpv4.OptionRelayAgentInformation.Code()]; ok && relayIP(req) != nil {
		o[dhcpv4.OptionRelayAgentInformation.Code()] = ri
	}
	return r.ToBytes()
}

// destination says where a reply goes (PXE-NOTES rule 4): a 4011 request is
// answered to its source; a relayed request to giaddr:67; a client that
// already has an address and asked for unicast to ciaddr:68; anything else
// is broadcast to 255.255.255.255:68 out of the arrival interface.
func destination(req *dhcpv4.DHCPv4, in Arrival) *net.UDPAddr {
	if in.Port == PXEPort {
		return in.Source
	}
	if g := relayIP(req); g != nil {
		return &net.UDPAddr{IP: g, Port: ServerPort}
	}
	if ci := req.ClientIPAddr; usableUnicast(ci) && !req.IsBroadcast() {
		return &net.UDPAddr{IP: ci.To4(), Port: ClientPort}
	}
	return &net.UDPAddr{IP: net.IPv4bcast, Port: ClientPort}
}

// validSource reports whether a 4011 request's source can be answered.
func validSource(a *net.UDPAddr) bool {
	if a == nil || a.Port == 0 {
		return false
	}
	ip4 := a.IP.To4()
	return ip4 != nil && !ip4.IsUnspecified() && !ip4.IsMulticast() && !ip4.Equal(net.IPv4bcast)
}

// usableUnicast reports whether ip is an IPv4 address a reply may be sent
// to: not unspecified, loopback, multicast or broadcast.
func usableUnicast(ip net.IP) bool {
	ip4 := ip.To4()
	return ip4 != nil && !ip4.IsUnspecified() && !ip4.IsLoopback() &&
		!ip4.IsMulticast() && !ip4.Equal(net.IPv4bcast)
}
