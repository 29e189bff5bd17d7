package dhcpproxy

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/siteboot/siteboot/discovery"
)

// outcome is what one packet did: the logged decision, the reply (nil for
// none) and the sightings recorded.
type outcome struct {
	Decision  string
	Reply     *summary
	Sightings []discovery.Sighting
}

// offer is the expected broadcast proxy OFFER from 10.0.0.2 carrying file.
func offer(file string, mods ...func(*summary)) *summary {
	s := &summary{
		Type: "OFFER", XID: testXID.String(), Flags: 0x8000,
		CIAddr: "0.0.0.0", YIAddr: "0.0.0.0", SIAddr: "10.0.0.2", GIAddr: "0.0.0.0",
		SName: "10.0.0.2", File: file,
		Opt54: "10.0.0.2", Opt60: "PXEClient", Opt67: file, Opt43: "hex:060108ff",
		To: "255.255.255.255:68",
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func asACK(s *summary)  { s.Type = "ACK" }
func asHTTP(s *summary) { s.Opt60, s.Opt43 = "HTTPClient", "" }

const uuidHex = "hex:0044454c4c4a001035804bb4c04f565931"

var (
	relayIPv4 = net.IPv4(10, 1, 0, 1).To4()
	withUUID  = dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, uuidOpt)
	withIPXE  = dhcpv4.WithUserClass("iPXE", false)
)

type handleCase struct {
	name   string
	pkt    []byte
	in     Arrival // arrive67 when zero
	closed bool    // lease gate closed
	want   outcome
}

func runHandleCases(t *testing.T, cases []handleCase, mod func(*Config)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, mod)
			f.gate.closed.Store(tc.closed)
			in := tc.in
			if in.Port == 0 {
				in = arrive67
			}
			d := f.srv.decide(tc.pkt, in)
			got := outcome{Decision: d.label(), Sightings: f.rec.sightings()}
			if d.reply != nil {
				r := summarize(t, d.reply, d.to)
				got.Reply = &r
				// Handle must agree with decide.
				reply, to, ok := f.srv.Handle(tc.pkt, in)
				if !ok || string(reply) != string(d.reply) || to.String() != d.to.String() {
					t.Errorf("Handle = %v, %v; decide said %v", ok, to, d.to)
				}
			}
			if diff := cmp.Diff(tc.want, got, equateAddrs); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHandleBootFiles(t *testing.T) {
	http := "http://10.0.0.2:8080"
	runHandleCases(t, []handleCase{
		{name: "bios arch 0 gets undionly.kpxe",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 0),
			want: outcome{Decision: "offer", Reply: offer("undionly.kpxe")}},
		{name: "arch 7 gets the x86_64 UEFI file",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi")}},
		{name: "arch 9 gets the x86_64 UEFI file too",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 9),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi")}},
		{name: "arch 11 gets the arm64 file",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 11),
			want: outcome{Decision: "offer", Reply: offer("arm64/ipxe.efi")}},
		{name: "arch 16 HTTP boot gets an http URL and HTTPClient, no option 43",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 16),
			want: outcome{Decision: "offer", Reply: offer(http+"/boot/ipxe.efi", asHTTP)}},
		{name: "arch 19 HTTP boot gets the arm64 file over http",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 19),
			want: outcome{Decision: "offer", Reply: offer(http+"/boot/arm64/ipxe.efi", asHTTP)}},
		{name: "HTTPClient class with a non-HTTP arch still gets a URL",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7,
				dhcpv4.WithOption(dhcpv4.OptClassIdentifier("HTTPClient:Arch:00007:UNDI:003016"))),
			want: outcome{Decision: "offer", Reply: offer(http+"/boot/ipxe.efi", asHTTP)}},
		{name: "arch without a boot file gets no answer",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 10),
			want: outcome{Decision: "no-bootfile"}},
		{name: "iPXE user class gets the script URL",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, withIPXE),
			want: outcome{Decision: "offer", Reply: offer(http + "/boot.ipxe")}},
		{name: "iPXE user class in RFC 3004 form gets the script URL",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 0, dhcpv4.WithUserClass("iPXE", true)),
			want: outcome{Decision: "offer", Reply: offer(http + "/boot.ipxe")}},
		{name: "option 175 without user class gets the script URL",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7,
				dhcpv4.WithGeneric(dhcpv4.GenericOptionCode(175), []byte{0xb1, 0x05, 0x01, 0x80, 0x86, 0x10, 0x0e})),
			want: outcome{Decision: "offer", Reply: offer(http + "/boot.ipxe")}},
		{name: "another user class is a raw PXE client",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, dhcpv4.WithUserClass("iPXE-ish", false)),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi")}},
		{name: "entry boot_file overrides the arch default",
			pkt:  pxeReq(t, macCustom, dhcpv4.MessageTypeDiscover, 7),
			want: outcome{Decision: "offer", Reply: offer("custom/snponly.efi")}},
		{name: "entry boot_file is served over http to HTTP boot",
			pkt:  pxeReq(t, macCustom, dhcpv4.MessageTypeDiscover, 16),
			want: outcome{Decision: "offer", Reply: offer(http+"/boot/custom/snponly.efi", asHTTP)}},
		{name: "iPXE gets the script even when the entry has a boot_file",
			pkt:  pxeReq(t, macCustom, dhcpv4.MessageTypeDiscover, 7, withIPXE),
			want: outcome{Decision: "offer", Reply: offer(http + "/boot.ipxe")}},
		{name: "entry boot_file URL goes to HTTP boot as is",
			pkt:  pxeReq(t, macURL, dhcpv4.MessageTypeDiscover, 16),
			want: outcome{Decision: "offer", Reply: offer("http://10.9.9.9/custom.efi", asHTTP)}},
		{name: "entry boot_file URL is not given to a TFTP client",
			pkt:  pxeReq(t, macURL, dhcpv4.MessageTypeDiscover, 7),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi")}},
		{name: "arch from the vendor class when option 93 is missing",
			pkt: buildReq(t, macPlain, dhcpv4.MessageTypeDiscover,
				dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003016"))),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi")}},
	}, nil)
}

func TestHandleReplyRules(t *testing.T) {
	src4011 := "10.0.0.50:1025"
	runHandleCases(t, []handleCase{
		{name: "relayed DISCOVER goes unicast to giaddr:67",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, dhcpv4.WithRelay(relayIPv4)),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi", func(s *summary) {
				s.Flags, s.GIAddr, s.To = 0, "10.1.0.1", "10.1.0.1:67"
			})}},
		{name: "relay agent information is echoed to the relay",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, dhcpv4.WithRelay(relayIPv4),
				dhcpv4.WithGeneric(dhcpv4.OptionRelayAgentInformation, []byte{1, 3, 'p', '1', '2'})),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi", func(s *summary) {
				s.Flags, s.GIAddr, s.To, s.Opt82 = 0, "10.1.0.1", "10.1.0.1:67", "hex:0103703132"
			})}},
		{name: "REQUEST on 4011 gets an ACK unicast to its source",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7,
				dhcpv4.WithClientIP(net.IPv4(10, 0, 0, 50)), dhcpv4.WithBroadcast(false)),
			in: arrive4011,
			want: outcome{Decision: "ack", Reply: offer("ipxe.efi", asACK, func(s *summary) {
				s.Flags, s.CIAddr, s.To = 0, "10.0.0.50", src4011
			})}},
		{name: "REQUEST on 4011 for bios gets an ACK too",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 0),
			in:   arrive4011,
			want: outcome{Decision: "ack", Reply: offer("undionly.kpxe", asACK, func(s *summary) { s.To = src4011 })}},
		{name: "DISCOVER on 4011 gets an OFFER to its source",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7),
			in:   arrive4011,
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi", func(s *summary) { s.To = src4011 })}},
		{name: "4011 request from port 0 is ignored",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7),
			in:   Arrival{Iface: "eth0", ServerIP: srvIP, Port: PXEPort, Source: &net.UDPAddr{IP: net.IPv4(10, 0, 0, 50)}},
			want: outcome{Decision: "ignored:bad-source"}},
		{name: "REQUEST on 67 naming us gets an ACK",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7,
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(srvIP))),
			want: outcome{Decision: "ack", Reply: offer("ipxe.efi", asACK)}},
		{name: "REQUEST on 67 without option 54 gets an ACK",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7),
			want: outcome{Decision: "ack", Reply: offer("ipxe.efi", asACK)}},
		{name: "REQUEST on 67 naming another server gets nothing",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7,
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 0, 1)))),
			want: outcome{Decision: "ignored:other-server"}},
		{name: "REQUEST on 67 with a malformed option 54 gets nothing",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7,
				dhcpv4.WithGeneric(dhcpv4.OptionServerIdentifier, []byte{10, 0, 0})),
			want: outcome{Decision: "ignored:other-server"}},
		{name: "client with an address asking unicast gets ciaddr:68",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7,
				dhcpv4.WithClientIP(net.IPv4(10, 0, 0, 77)), dhcpv4.WithBroadcast(false)),
			in: unicast67("10.0.0.77", ClientPort),
			want: outcome{Decision: "ack", Reply: offer("ipxe.efi", asACK, func(s *summary) {
				s.Flags, s.CIAddr, s.To = 0, "10.0.0.77", "10.0.0.77:68"
			})}},
		{name: "broadcast giaddr is refused",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, dhcpv4.WithGatewayIP(net.IPv4bcast)),
			want: outcome{Decision: "ignored:bad-giaddr"}},
		{name: "loopback giaddr is refused",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, dhcpv4.WithGatewayIP(net.IPv4(127, 0, 0, 1))),
			want: outcome{Decision: "ignored:bad-giaddr"}},
		{name: "multicast giaddr is refused",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, dhcpv4.WithGatewayIP(net.IPv4(224, 0, 0, 1))),
			want: outcome{Decision: "ignored:bad-giaddr"}},
		{name: "no server address on the arrival interface",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7),
			in:   Arrival{Iface: "eth9", Port: ServerPort},
			want: outcome{Decision: "ignored:no-server-ip"}},
		{name: "gate closed: no reply",
			pkt:    pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7),
			closed: true,
			want:   outcome{Decision: "gate-closed"}},
		{name: "gate closed on 4011: no reply",
			pkt:    pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7),
			in:     arrive4011,
			closed: true,
			want:   outcome{Decision: "gate-closed"}},
	}, nil)
}

func TestHandleOption97(t *testing.T) {
	runHandleCases(t, []handleCase{
		{name: "absent: not echoed",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi")}},
		{name: "empty: echoed empty",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7,
				dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, []byte{})),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi", func(s *summary) { s.Opt97 = "hex:" })}},
		{name: "17 bytes with type 0: echoed exactly",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, withUUID),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi", func(s *summary) { s.Opt97 = uuidHex })}},
		{name: "17 bytes with type 1: treated as no UUID",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7,
				dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, append([]byte{1}, uuidOpt[1:]...))),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi")}},
		{name: "16 bytes: treated as no UUID",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7,
				dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, uuidOpt[1:])),
			want: outcome{Decision: "offer", Reply: offer("ipxe.efi")}},
		{name: "echoed on 4011 too",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 0, withUUID),
			in:  arrive4011,
			want: outcome{Decision: "ack", Reply: offer("undionly.kpxe", asACK, func(s *summary) {
				s.Opt97, s.To = uuidHex, "10.0.0.50:1025"
			})}},
	}, nil)
}

func TestHandleDiscovery(t *testing.T) {
	sighting := func(mac, uuid, arch string, relay net.IP) []discovery.Sighting {
		s := discovery.Sighting{MAC: mac, ProductUUID: uuid, Arch: arch, Relay: relay, Iface: "eth0", At: testNow}
		if relay != nil { // the fixture's relays are configured ones
			s.Source = netip.AddrFrom4([4]byte(relay.To4()))
		}
		return []discovery.Sighting{s}
	}
	runHandleCases(t, []handleCase{
		{name: "unknown MAC: no reply, sighting with uuid, arch and relay",
			pkt: pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 7, withUUID, dhcpv4.WithRelay(relayIPv4)),
			want: outcome{Decision: "unknown-mac",
				Sightings: sighting(macUnknown, "4c4c4544-004a-3510-804b-b4c04f565931", "x86_64-efi", relayIPv4)}},
		{name: "unknown HTTP-boot MAC, direct, without uuid",
			pkt:  pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 16),
			want: outcome{Decision: "unknown-mac", Sightings: sighting(macUnknown, "", "x86_64-efi-http", nil)}},
		{name: "unknown MAC with an unknown arch is recorded by number",
			pkt:  pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 20),
			want: outcome{Decision: "unknown-mac", Sightings: sighting(macUnknown, "", "arch-20", nil)}},
		{name: "unknown MAC without any arch",
			pkt: buildReq(t, macUnknown, dhcpv4.MessageTypeDiscover,
				dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient"))),
			want: outcome{Decision: "unknown-mac", Sightings: sighting(macUnknown, "", "", nil)}},
		{name: "placeholder all-zero uuid is not recorded",
			pkt: pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 0,
				dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, make([]byte, 17))),
			want: outcome{Decision: "unknown-mac", Sightings: sighting(macUnknown, "", "bios", nil)}},
		{name: "unknown MAC on 4011",
			pkt:  pxeReq(t, macUnknown, dhcpv4.MessageTypeRequest, 11),
			in:   arrive4011,
			want: outcome{Decision: "unknown-mac", Sightings: sighting(macUnknown, "", "arm64-efi", nil)}},
		{name: "expired entry is an unknown MAC",
			pkt:  pxeReq(t, macExpired, dhcpv4.MessageTypeDiscover, 7),
			want: outcome{Decision: "unknown-mac", Sightings: sighting(macExpired, "", "x86_64-efi", nil)}},
		{name: "unknown MAC is recorded while the gate is closed",
			pkt:    pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 7),
			closed: true,
			want:   outcome{Decision: "unknown-mac", Sightings: sighting(macUnknown, "", "x86_64-efi", nil)}},
		{name: "non-PXE client: no reply, no sighting",
			pkt: buildReq(t, macUnknown, dhcpv4.MessageTypeDiscover,
				dhcpv4.WithOption(dhcpv4.OptClassIdentifier("MSFT 5.0"))),
			want: outcome{Decision: "ignored:not-pxe"}},
		{name: "client without option 60: no reply, no sighting",
			pkt:  buildReq(t, macPlain, dhcpv4.MessageTypeDiscover),
			want: outcome{Decision: "ignored:not-pxe"}},
		{name: "lowercase pxeclient is not PXE",
			pkt: buildReq(t, macUnknown, dhcpv4.MessageTypeDiscover,
				dhcpv4.WithOption(dhcpv4.OptClassIdentifier("pxeclient:Arch:00007"))),
			want: outcome{Decision: "ignored:not-pxe"}},
		{name: "REQUEST from an unknown MAC to another server: not ours, not recorded",
			pkt: pxeReq(t, macUnknown, dhcpv4.MessageTypeRequest, 7,
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 0, 1)))),
			want: outcome{Decision: "ignored:other-server"}},
	}, nil)
}

func TestHandleIgnored(t *testing.T) {
	asReply := func(d *dhcpv4.DHCPv4) { d.OpCode = dhcpv4.OpcodeBootReply }
	runHandleCases(t, []handleCase{
		{name: "known MAC with an unknown arch code",
			pkt:  pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 20),
			want: outcome{Decision: "ignored:unknown-arch"}},
		{name: "option 93 of odd length",
			pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7,
				dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 7, 0})),
			want: outcome{Decision: "ignored:unknown-arch"}},
		{name: "vendor class with a garbled arch field",
			pkt: buildReq(t, macPlain, dhcpv4.MessageTypeDiscover,
				dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:0x007:UNDI"))),
			want: outcome{Decision: "ignored:unknown-arch"}},
		{name: "INFORM", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeInform, 7),
			want: outcome{Decision: "ignored:message-type"}},
		{name: "RELEASE", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeRelease, 7),
			want: outcome{Decision: "ignored:message-type"}},
		{name: "no message type", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7,
			dhcpv4.WithoutOption(dhcpv4.OptionDHCPMessageType)),
			want: outcome{Decision: "ignored:message-type"}},
		{name: "BOOTREPLY", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeOffer, 7, asReply),
			want: outcome{Decision: "ignored:not-bootrequest"}},
		{name: "not Ethernet", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7,
			dhcpv4.WithHWType(iana.HWTypeIEEE802)),
			want: outcome{Decision: "ignored:not-ethernet"}},
		{name: "16-byte hardware address", pkt: pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7,
			dhcpv4.WithHwAddr(make(net.HardwareAddr, 16))),
			want: outcome{Decision: "ignored:not-ethernet"}},
		{name: "multicast MAC", pkt: pxeReq(t, "01:00:5e:00:00:01", dhcpv4.MessageTypeDiscover, 7),
			want: outcome{Decision: "ignored:not-ethernet"}},
		{name: "all-zero MAC", pkt: pxeReq(t, "00:00:00:00:00:00", dhcpv4.MessageTypeDiscover, 7),
			want: outcome{Decision: "ignored:not-ethernet"}},
	}, nil)
}
