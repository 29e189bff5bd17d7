package pxe

import (
	"bytes"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

func TestBuildDiscover(t *testing.T) {
	tests := []struct {
		name       string
		spec       DiscoverSpec
		wantClass  string
		wantGiaddr string
		wantHops   uint8
	}{
		{name: "uefi default", spec: DiscoverSpec{Arch: 7}, wantClass: "PXEClient:Arch:00007:UNDI:003016", wantGiaddr: "0.0.0.0"},
		{name: "bios", spec: DiscoverSpec{Arch: 0}, wantClass: "PXEClient:Arch:00000:UNDI:003016", wantGiaddr: "0.0.0.0"},
		{name: "custom class", spec: DiscoverSpec{Arch: 11, VendorClass: "PXEClient:Arch:00011:UNDI:003000"}, wantClass: "PXEClient:Arch:00011:UNDI:003000", wantGiaddr: "0.0.0.0"},
		{name: "relayed", spec: DiscoverSpec{Arch: 7, Giaddr: net.IPv4(10, 99, 2, 1).To4()}, wantClass: "PXEClient:Arch:00007:UNDI:003016", wantGiaddr: "10.99.2.1", wantHops: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkt, err := BuildDiscover(testMAC, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			SetXID(pkt, 0xdeadbeef)
			d, err := dhcpv4.FromBytes(pkt)
			if err != nil {
				t.Fatalf("library cannot parse our DISCOVER: %v", err)
			}
			type view struct {
				Type, Class, Giaddr, MAC, XID string
				Broadcast                     bool
				Hops                          uint8
				Arch, NII, GUID               []byte
			}
			got := view{
				Type: d.MessageType().String(), Class: d.ClassIdentifier(), Giaddr: d.GatewayIPAddr.String(),
				MAC: d.ClientHWAddr.String(), XID: d.TransactionID.String(), Broadcast: d.IsBroadcast(), Hops: d.HopCount,
				Arch: d.Options.Get(dhcpv4.OptionClientSystemArchitectureType),
				NII:  d.Options.Get(dhcpv4.OptionClientNetworkInterfaceIdentifier),
				GUID: d.Options.Get(dhcpv4.OptionClientMachineIdentifier),
			}
			want := view{
				Type: "DISCOVER", Class: tc.wantClass, Giaddr: tc.wantGiaddr, MAC: testMAC.String(),
				XID: "0xdeadbeef", Broadcast: true, Hops: tc.wantHops,
				Arch: []byte{byte(tc.spec.Arch >> 8), byte(tc.spec.Arch)}, NII: []byte{1, 3, 16},
				GUID: append(make([]byte, 11), testMAC...),
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("DISCOVER mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildDiscoverUUIDAndUserClass(t *testing.T) {
	uuid := []byte{0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}
	pkt, err := BuildDiscover(testMAC, DiscoverSpec{Arch: 0, VendorClass: "PXEClient:Arch:00000:UNDI:002001", UUID: uuid, UserClass: "iPXE"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dhcpv4.FromBytes(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.Options.Get(dhcpv4.OptionClientMachineIdentifier), append([]byte{0}, uuid...); !bytes.Equal(got, want) {
		t.Errorf("option 97 = %x, want %x", got, want)
	}
	if got := string(d.Options.Get(dhcpv4.OptionUserClassInformation)); got != "iPXE" {
		t.Errorf("option 77 = %q, want iPXE (raw, as iPXE sends it)", got)
	}
	if got := d.ClassIdentifier(); got != "PXEClient:Arch:00000:UNDI:002001" {
		t.Errorf("option 60 = %q", got)
	}
	if _, err := BuildDiscover(testMAC, DiscoverSpec{UUID: uuid[:15]}); err == nil {
		t.Error("a 15-byte UUID was accepted")
	}
	// Without a user class there is no option 77 at all: PXE firmware.
	pkt, _ = BuildDiscover(testMAC, DiscoverSpec{Arch: 7})
	if d, _ := dhcpv4.FromBytes(pkt); d.Options.Has(dhcpv4.OptionUserClassInformation) {
		t.Error("option 77 present without a user class")
	}
}
