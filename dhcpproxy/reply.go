package dhcpproxy

import (
	"net"
	"net/netip"

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

// buildReply encodes the OFFER or ACK for req. Option 82 is echoed only to
// a relay the request was accepted from (relayed), as RFC 3046 §2.2 asks.
func buildReply(req *dhcpv4.DHCPv4, c *client, mt dhcpv4.MessageType, serverIP net.IP, file string, relayed bool) []byte {
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
	if ri, ok := req.Options[dhcpv4.OptionRelayAgentInformation.Code()]; ok && relayed {
		o[dhcpv4.OptionRelayAgentInformation.Code()] = ri
	}
	return r.ToBytes()
}

// destination says where a reply goes (the PXE field rules): a 4011
// request is answered to its source; a request accepted from a relay to
// relay:67; a client that already has an address on the arrival subnet,
// sent from it and asked for unicast, to ciaddr:68; anything else is
// broadcast to 255.255.255.255:68 out of the arrival interface, which stays
// on the link. A client cannot name another destination.
func destination(req *dhcpv4.DHCPv4, in Arrival, relay netip.Addr) *net.UDPAddr {
	if in.Port == PXEPort {
		return in.Source
	}
	if relay.IsValid() {
		return &net.UDPAddr{IP: relay.AsSlice(), Port: ServerPort}
	}
	ci := addrOf(req.ClientIPAddr)
	if !req.IsBroadcast() && ci.IsValid() && in.Net.IsValid() && in.Net.Contains(ci) && hostAddr(ci, in.Net) && sourceAddr(in) == ci {
		return &net.UDPAddr{IP: ci.AsSlice(), Port: ClientPort}
	}
	return &net.UDPAddr{IP: net.IPv4bcast, Port: ClientPort}
}

// validSource reports whether a 4011 request's source can be answered: a
// port, and a host address (see hostAddr; loopback is allowed, as the
// kernel delivers it only from this host).
func validSource(in Arrival) bool {
	a := in.Source
	if a == nil || a.Port == 0 {
		return false
	}
	ip := addrOf(a.IP)
	return ip.IsLoopback() || hostAddr(ip, in.Net)
}
