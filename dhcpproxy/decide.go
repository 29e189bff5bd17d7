package dhcpproxy

import (
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// decision is the outcome of one packet, for the caller, the log and the
// metrics.
type decision struct {
	msgType string // discover, request, other, malformed
	result  string // one of the result* constants
	reason  string // why it was ignored or has no boot file
	mac     string
	ipxe    bool // the request came from iPXE, not the firmware
	xid     dhcpv4.TransactionID
	giaddr  net.IP     // as the request says; not necessarily trusted
	relay   netip.Addr // the relay accepted for this request; zero if none
	viaConf bool       // relay is one of Config.Relays
	arch    string
	epoch   uint64
	file    string
	reply   []byte
	to      *net.UDPAddr
}

// label is the decision as logged: the result, with the reason when the
// packet was ignored.
func (d *decision) label() string {
	if d.result == resultIgnored {
		return resultIgnored + ":" + d.reason
	}
	return d.result
}

// stage is the boot stage of an answered request, for the log limits.
func (d *decision) stage() string {
	if d.ipxe {
		return stageIPXE
	}
	return stagePXE
}

func (d decision) ignore(reason string) decision {
	d.result, d.reason = resultIgnored, reason
	return d
}

// replyType maps a request's message type to the reply's and to the
// metrics label; MessageTypeNone means "not answered".
func replyType(mt dhcpv4.MessageType) (dhcpv4.MessageType, string) {
	switch mt {
	case dhcpv4.MessageTypeDiscover:
		return dhcpv4.MessageTypeOffer, "discover"
	case dhcpv4.MessageTypeRequest:
		return dhcpv4.MessageTypeAck, "request"
	}
	return dhcpv4.MessageTypeNone, "other"
}

// decide runs the checks that apply to any packet, then decideClient.
func (s *Server) decide(pkt []byte, in Arrival) decision {
	d := decision{msgType: "malformed"}
	if manyOptions(pkt) {
		return d.ignore(reasonManyOptions)
	}
	req, err := dhcpv4.FromBytes(pkt)
	if err != nil {
		return d.ignore("malformed")
	}
	d.xid = req.TransactionID
	d.giaddr = relayIP(req)
	rt, label := replyType(req.MessageType())
	d.msgType = label
	if req.OpCode != dhcpv4.OpcodeBootRequest {
		return d.ignore("not-bootrequest")
	}
	c, reason := parseClient(req)
	d.mac, d.ipxe = c.mac, c.ipxe
	if reason != "" {
		return d.ignore(reason)
	}
	if c.hasArch {
		d.arch = ArchName(c.arch)
	}
	if rt == dhcpv4.MessageTypeNone {
		return d.ignore("message-type")
	}
	return s.decideClient(req, &c, rt, in, d)
}

// maxOptions is the most options a request may carry; firmware and iPXE
// send 8 to 15. Decoding is the costly part of a junk packet: a datagram
// of one-byte options took 100-130 µs against 4-5 µs for a DISCOVER, and
// one reader decides for a whole socket (serveBatches).
const maxOptions = 64

// reasonManyOptions: a request with more than maxOptions options or
// maxPads pads, or its end option beyond maxEndAt.
const reasonManyOptions = "too-many-options"

// maxPads is the most pad bytes a request may carry before its end
// option: the decoder takes them one at a time (8,760 of them cost 30 µs).
// Firmware pads after the end option, which is never decoded.
const maxPads = 256

// maxEndAt is the furthest a request's end option may lie: an Ethernet
// frame's UDP payload. No client sends a larger request unfragmented, and
// the decoder's cost grows with the option bytes (33 options of 255 bytes
// each cost 25 µs, against 3 µs for a DISCOVER).
const maxEndAt = 1500

// manyOptions reports whether pkt, a BOOTP message, carries more than
// maxOptions options, or more than maxPads pads, or its end option beyond
// maxEndAt (options after its magic cookie), by a walk that decodes
// nothing. What it cannot walk, FromBytes rejects.
func manyOptions(pkt []byte) bool {
	const optionsAt = 240 // the fixed header and the magic cookie
	n, pads := 0, 0
	for i := optionsAt; i < len(pkt); {
		if i >= maxEndAt {
			return true
		}
		switch pkt[i] {
		case 0: // pad
			if pads++; pads > maxPads {
				return true
			}
			i++
			continue
		case 255: // end
			return false
		}
		if n++; n > maxOptions {
			return true
		}
		if i+1 >= len(pkt) {
			return false
		}
		i += 2 + int(pkt[i+1])
	}
	return false
}

// decideClient decides for a network-boot client's DISCOVER or REQUEST.
func (s *Server) decideClient(req *dhcpv4.DHCPv4, c *client, rt dhcpv4.MessageType, in Arrival, d decision) decision {
	serverIP := s.serverIP(in)
	switch {
	case serverIP == nil:
		return d.ignore("no-server-ip")
	case in.Port == PXEPort && !validSource(in):
		return d.ignore(reasonBadSourceAddr)
	case rt == dhcpv4.MessageTypeAck && in.Port != PXEPort && s.namesOtherServer(req, serverIP, in):
		return d.ignore("other-server")
	}
	if in.Port != PXEPort && d.giaddr != nil {
		v := s.checkRelay(req, addrOf(d.giaddr), in)
		if v.reason != "" {
			return d.ignore(v.reason)
		}
		if ri, ok := req.Options[dhcpv4.OptionRelayAgentInformation.Code()]; ok && !checkRelayInfo(ri) {
			return d.ignore(reasonBadRelayInfo)
		}
		d.relay, d.viaConf = v.relay, v.configured
	}
	e, ok := s.cfg.Entries.Lookup(c.mac, s.cfg.Now())
	if !ok || !e.AcceptsUUID(c.uuid) {
		// A request the entry's UUID pin refuses is a machine the site does
		// not know: silent, and recorded like one.
		if s.cfg.Discovery != nil {
			s.cfg.Discovery.Record(s.sighting(c, &d, in))
		}
		d.result = resultUnknownMAC
		if ok {
			d.result, d.reason = resultUUIDMismatch, uuidMismatch(e.ProductUUID, c.uuid)
		}
		return d
	}
	if s.cfg.Observed != nil {
		s.cfg.Observed.Observe(s.sighting(c, &d, in))
	}
	_, httpArch, known := lookupArch(c.arch)
	if !c.hasArch || !known {
		return d.ignore("unknown-arch")
	}
	if httpArch {
		c.class = classHTTP
	}
	file, err := s.bootFile(c, e.BootFile, serverIP)
	if err != nil {
		d.result, d.reason = resultNoBootFile, err.Error()
		return d
	}
	d.file = file
	return s.gatedReply(req, c, rt, serverIP, in, d)
}

// gatedReply encodes the reply, then checks the lease gate last.
func (s *Server) gatedReply(req *dhcpv4.DHCPv4, c *client, rt dhcpv4.MessageType, serverIP net.IP, in Arrival, d decision) decision {
	reply := buildReply(req, c, rt, serverIP, d.file, d.relay.IsValid())
	epoch, open := s.cfg.Gate.Gate()
	d.epoch = epoch
	if !open {
		d.result = resultGateClosed
		return d
	}
	d.reply, d.to = reply, destination(req, in, d.relay)
	d.result = resultOffer
	if rt == dhcpv4.MessageTypeAck {
		d.result = resultAck
	}
	return d
}

// uuidMismatch says why a pinned entry refused a request.
func uuidMismatch(pin, got string) string {
	if got == "" {
		return "the entry pins product_uuid " + pin + "; the request carried none (option 97)"
	}
	return "the entry pins product_uuid " + pin + "; the request carried " + got
}

// namesOtherServer reports whether a REQUEST carries a server identifier
// (option 54) that is neither the address we advertise nor the arrival
// interface's: the client chose another server's offer.
func (s *Server) namesOtherServer(req *dhcpv4.DHCPv4, serverIP net.IP, in Arrival) bool {
	if !req.Options.Has(dhcpv4.OptionServerIdentifier) {
		return false
	}
	sid := req.ServerIdentifier()
	return sid == nil || !(sid.Equal(serverIP) || sid.Equal(in.ServerIP))
}
