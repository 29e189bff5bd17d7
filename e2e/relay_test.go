package e2e

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	"github.com/siteboot/siteboot/internal/netlab"
	"google.golang.org/protobuf/testing/protocmp"
)

// relayUUID is the option 97 the crafted DISCOVERs carry (type 0 + 16
// bytes in the SMBIOS order firmware uses: the first three fields
// little-endian), and relayUUIDString the UUID dhcpproxy reads from it.
const (
	relayUUID       = "00" + "67452301ab89efcd0123456789abcdef"
	relayUUIDString = "01234567-89ab-cdef-0123-456789abcdef"
)

// relayed is what a test compares of an answer that came back to the relay.
type relayed struct {
	From      string
	Type      string
	XID       string
	Hops      uint8
	YIAddr    string
	SIAddr    string
	GIAddr    string
	ServerID  string
	File      string
	Opt67     string
	Class     string
	Opt97     string
	ClientMAC string
}

// pxeClient is what a crafted DISCOVER says about its client.
type pxeClient struct {
	mac   net.HardwareAddr
	arch  uint16
	class string // option 60
	ipxe  bool   // user class iPXE
}

// relayRig is siteboot on one lab host and a relay's socket on UDP 67 of
// another.
type relayRig struct {
	app    *appliance
	pc     net.PacketConn
	server *net.UDPAddr // siteboot's address:67
	giaddr net.IP
}

// TestRelayedDiscover: a lab host acting as a DHCP relay (RFC 2131 §4.1,
// giaddr = its address, hops 1) sends crafted DISCOVERs unicast to
// siteboot's address:67. For a MAC with an entry the OFFER comes back to
// giaddr:67 with yiaddr 0, siteboot's own address as siaddr and option 54,
// the boot file for the client's arch and the same xid; for an unknown MAC
// nothing comes back, and `siteboot discovered ls` shows it with the relay.
func TestRelayedDiscover(t *testing.T) {
	netlab.Require(t, netlab.Needs{Slow: true})
	r := newRelayRig(t)
	ctx, cancel := context.WithTimeout(r.app.host.Lab().Context(), time.Minute)
	defer cancel()
	known := netlab.RandomMAC()
	r.app.mustCLI(ctx, "entry", "add", "--node-id", "node-relayed", "--mac", known.String(), "--ttl", "1h")
	base := r.app.base
	cases := []struct {
		name   string
		client pxeClient
		file   string
		class  string // option 60 of the reply
	}{
		{"bios pxe", pxeClient{known, 0, "PXEClient:Arch:00000:UNDI:002001", false}, "undionly.kpxe", "PXEClient"},
		{"uefi pxe", pxeClient{known, 7, "PXEClient:Arch:00007:UNDI:003000", false}, "ipxe.efi", "PXEClient"},
		{"ipxe", pxeClient{known, 0, "PXEClient:Arch:00000:UNDI:002001", true}, base + "/boot.ipxe", "PXEClient"},
		{"uefi http", pxeClient{known, 16, "HTTPClient:Arch:00016:UNDI:003000", false}, base + "/boot/ipxe.efi", "HTTPClient"},
	}
	srv := r.server.IP.String()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			xid := dhcpv4.TransactionID{0x5b, 0x7e, 0x1a, byte(i)}
			got := r.exchange(t, tc.client, xid)
			want := relayed{
				// hops is 0 in a server's reply (RFC 2131 table 3).
				From: srv + ":67", Type: "OFFER", XID: xid.String(), Hops: 0,
				YIAddr: "0.0.0.0", SIAddr: srv, GIAddr: r.giaddr.String(), ServerID: srv,
				File: tc.file, Opt67: tc.file, Class: tc.class, Opt97: relayUUID, ClientMAC: known.String(),
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("relayed OFFER (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("unknown mac", func(t *testing.T) { r.checkUnknown(ctx, t) })
	m := r.app.mustScrape(ctx)
	want := []string{"{result=offer,type=discover} 4", "{result=unknown-mac,type=discover} 1"}
	if diff := cmp.Diff(want, m.nonZero("siteboot_dhcp_requests_total")); diff != "" {
		t.Errorf("siteboot_dhcp_requests_total (-want +got):\n%s", diff)
	}
}

func newRelayRig(t *testing.T) *relayRig {
	t.Helper()
	lab := netlab.New(t, netlab.Config{})
	boot, relay, web := lab.AddHost("boot"), lab.AddHost("relay"), lab.AddHost("web")
	o := startOrigin(t, web, nil)
	app := startAppliance(t, boot, applianceConfig{KernelURL: o.base + kernelPath, InitrdURL: o.base + initrdPath})
	pc, err := relay.ListenPacket(lab.Context(), nil, "udp4", relay.Addr().String()+":67")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return &relayRig{app: app, pc: pc, server: &net.UDPAddr{IP: boot.Addr().AsSlice(), Port: 67}, giaddr: relay.Addr().AsSlice()}
}

// exchange relays a DISCOVER for c and returns the answer that came back.
func (r *relayRig) exchange(t *testing.T, c pxeClient, xid dhcpv4.TransactionID) relayed {
	t.Helper()
	send(t, r.pc, relayedDiscover(t, c, xid, r.giaddr), r.server)
	got, err := receive(r.pc, 5*time.Second)
	if err != nil {
		t.Fatalf("no answer at the relay: %v\nsiteboot:\n%s", err, r.app.logDigest(10))
	}
	return got
}

// checkUnknown: a relayed DISCOVER for a MAC without an entry gets nothing
// within 1 s and is listed with the relay's address.
func (r *relayRig) checkUnknown(ctx context.Context, t *testing.T) {
	c := pxeClient{netlab.RandomMAC(), 7, "PXEClient:Arch:00007:UNDI:003000", false}
	send(t, r.pc, relayedDiscover(t, c, dhcpv4.TransactionID{0x5b, 0x7e, 0x1a, 0xff}, r.giaddr), r.server)
	if got, err := receive(r.pc, time.Second); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("unknown MAC: want no answer within 1 s, got %+v (err %v)", got, err)
	}
	mac := c.mac.String()
	listed := r.app.discovered(ctx, mac)
	want := &agentv1.DiscoveredMachine{Mac: mac, Arch: "x86_64-efi", ProductUuid: relayUUIDString, Relay: r.giaddr.String(), Count: 1}
	got := &agentv1.DiscoveredMachine{Mac: listed.GetMac(), Arch: listed.GetArch(), ProductUuid: listed.GetProductUuid(), Relay: listed.GetRelay(), Count: listed.GetCount()}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("discovered ls entry (-want +got):\n%s", diff)
	}
}

// relayedDiscover builds a DISCOVER as a relay forwards it: giaddr set,
// hops 1, with the PXE options the client sends.
func relayedDiscover(t *testing.T, c pxeClient, xid dhcpv4.TransactionID, giaddr net.IP) []byte {
	t.Helper()
	uuid, _ := hex.DecodeString(relayUUID)
	mods := []dhcpv4.Modifier{
		dhcpv4.WithTransactionID(xid),
		dhcpv4.WithHwAddr(c.mac),
		dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
		dhcpv4.WithRelay(giaddr),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier(c.class)),
		dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{byte(c.arch >> 8), byte(c.arch)}),
		dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, uuid),
	}
	if c.ipxe {
		mods = append(mods, dhcpv4.WithUserClass("iPXE", false))
	}
	d, err := dhcpv4.New(mods...)
	if err != nil {
		t.Fatal(err)
	}
	if d.HopCount != 1 || !d.GatewayIPAddr.Equal(giaddr) {
		t.Fatalf("crafted DISCOVER: hops %d giaddr %v, want 1 and %v", d.HopCount, d.GatewayIPAddr, giaddr)
	}
	return d.ToBytes()
}

func send(t *testing.T, pc net.PacketConn, pkt []byte, to net.Addr) {
	t.Helper()
	if _, err := pc.WriteTo(pkt, to); err != nil {
		t.Fatalf("send to %v: %v", to, err)
	}
}

// receive reads one DHCP reply within timeout.
func receive(pc net.PacketConn, timeout time.Duration) (relayed, error) {
	if err := pc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return relayed{}, err
	}
	buf := make([]byte, 2048)
	n, from, err := pc.ReadFrom(buf)
	if err != nil {
		return relayed{}, err
	}
	d, err := dhcpv4.FromBytes(buf[:n])
	if err != nil {
		return relayed{From: from.String()}, err
	}
	return relayed{
		From: from.String(), Type: d.MessageType().String(), XID: d.TransactionID.String(), Hops: d.HopCount,
		YIAddr: d.YourIPAddr.String(), SIAddr: d.ServerIPAddr.String(), GIAddr: d.GatewayIPAddr.String(),
		ServerID: d.ServerIdentifier().String(), File: d.BootFileName, Opt67: d.BootFileNameOption(),
		Class: d.ClassIdentifier(), Opt97: hex.EncodeToString(d.Options.Get(dhcpv4.OptionClientMachineIdentifier)),
		ClientMAC: d.ClientHWAddr.String(),
	}, nil
}
