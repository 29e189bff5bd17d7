package main

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

func TestBuildDiscover(t *testing.T) {
	tests := []struct {
		name       string
		spec       discoverSpec
		wantClass  string
		wantGiaddr string
		wantHops   uint8
	}{
		{name: "uefi default", spec: discoverSpec{Arch: 7}, wantClass: "PXEClient:Arch:00007:UNDI:003016", wantGiaddr: "0.0.0.0"},
		{name: "bios", spec: discoverSpec{Arch: 0}, wantClass: "PXEClient:Arch:00000:UNDI:003016", wantGiaddr: "0.0.0.0"},
		{name: "custom class", spec: discoverSpec{Arch: 11, VendorClass: "PXEClient:Arch:00011:UNDI:003000"}, wantClass: "PXEClient:Arch:00011:UNDI:003000", wantGiaddr: "0.0.0.0"},
		{name: "relayed", spec: discoverSpec{Arch: 7, Giaddr: net.IPv4(10, 99, 2, 1).To4()}, wantClass: "PXEClient:Arch:00007:UNDI:003016", wantGiaddr: "10.99.2.1", wantHops: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkt, err := buildDiscover(testMAC, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			setXID(pkt, 0xdeadbeef)
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
