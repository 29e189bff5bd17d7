package pxe

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

func TestBuildRequest(t *testing.T) {
	uuid := []byte{0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}
	ci, srv := netip.MustParseAddr("10.99.1.200"), netip.MustParseAddr("10.99.1.2")
	tests := []struct {
		name       string
		spec       RequestSpec
		wantServer string
		wantVendor []byte
		wantBcast  bool
		wantClass  string
		wantUser   string
	}{
		{
			// PXE 2.1 boot server discovery for a menu item, as edk2
			// sends it: sub-option 71 with layer 0, no option 54.
			name:       "boot server discovery",
			spec:       RequestSpec{DiscoverSpec: DiscoverSpec{Arch: 0, VendorClass: "PXEClient:Arch:00000:UNDI:002001", UUID: uuid}, Ciaddr: ci, Item: &BootItem{Type: 0x8000}},
			wantVendor: []byte{71, 4, 0x80, 0, 0, 0, 255},
			wantClass:  "PXEClient:Arch:00000:UNDI:002001",
		},
		{
			// edk2 after a proxy offer without discovery options: nothing
			// but the DISCOVER's options and ciaddr.
			name:      "edk2 BINL request",
			spec:      RequestSpec{DiscoverSpec: DiscoverSpec{Arch: 7, UUID: uuid}, Ciaddr: ci},
			wantClass: "PXEClient:Arch:00007:UNDI:003016",
		},
		{
			// iPXE's ProxyDHCPREQUEST: the proxy in option 54, the
			// broadcast flag (it has an address), user class iPXE.
			name: "iPXE ProxyDHCPREQUEST",
			spec: RequestSpec{DiscoverSpec: DiscoverSpec{Arch: 7, VendorClass: "PXEClient:Arch:00007:UNDI:003010", UUID: uuid, UserClass: "iPXE"},
				Ciaddr: ci, ServerID: srv, Broadcast: true},
			wantServer: "10.99.1.2", wantBcast: true, wantClass: "PXEClient:Arch:00007:UNDI:003010", wantUser: "iPXE",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkt, err := BuildRequest(testMAC, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			SetXID(pkt, 0x01020304)
			d, err := dhcpv4.FromBytes(pkt)
			if err != nil {
				t.Fatalf("library cannot parse our REQUEST: %v", err)
			}
			type view struct {
				Type, Class, User, MAC, XID, Ciaddr, Giaddr, Server string
				Broadcast                                           bool
				Arch, GUID, Vendor                                  []byte
			}
			got := view{
				Type: d.MessageType().String(), Class: d.ClassIdentifier(), User: string(d.Options.Get(dhcpv4.OptionUserClassInformation)),
				MAC: d.ClientHWAddr.String(), XID: d.TransactionID.String(), Ciaddr: d.ClientIPAddr.String(), Giaddr: d.GatewayIPAddr.String(),
				Broadcast: d.IsBroadcast(), Arch: d.Options.Get(dhcpv4.OptionClientSystemArchitectureType),
				GUID: d.Options.Get(dhcpv4.OptionClientMachineIdentifier), Vendor: d.Options.Get(dhcpv4.OptionVendorSpecificInformation),
			}
			if sid := d.ServerIdentifier(); sid != nil {
				got.Server = sid.String()
			}
			want := view{
				Type: "REQUEST", Class: tc.wantClass, User: tc.wantUser, MAC: testMAC.String(), XID: "0x01020304",
				Ciaddr: "10.99.1.200", Giaddr: "0.0.0.0", Server: tc.wantServer, Broadcast: tc.wantBcast,
				Arch: []byte{byte(tc.spec.Arch >> 8), byte(tc.spec.Arch)}, GUID: append([]byte{0}, uuid...), Vendor: tc.wantVendor,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("REQUEST mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildRequestRefuses(t *testing.T) {
	for name, s := range map[string]RequestSpec{
		"no ciaddr":      {},
		"IPv6 ciaddr":    {Ciaddr: netip.MustParseAddr("fd00::1")},
		"IPv6 server ID": {Ciaddr: netip.MustParseAddr("10.0.0.1"), ServerID: netip.MustParseAddr("fd00::2")},
		"a 3-byte UUID":  {Ciaddr: netip.MustParseAddr("10.0.0.1"), DiscoverSpec: DiscoverSpec{UUID: []byte{1, 2, 3}}},
	} {
		if _, err := BuildRequest(testMAC, s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
