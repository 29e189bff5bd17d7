package main

import (
	"encoding/binary"
	"fmt"
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// discoverSpec is what every DISCOVER of a run carries besides its MAC.
type discoverSpec struct {
	Arch        uint16 // option 93
	VendorClass string // option 60; empty: PXEClient:Arch:<arch>:UNDI:003016
	Giaddr      net.IP // relay address (nil: a direct broadcast)
}

func (s discoverSpec) vendorClass() string {
	if s.VendorClass != "" {
		return s.VendorClass
	}
	return fmt.Sprintf("PXEClient:Arch:%05d:UNDI:003016", s.Arch)
}

// buildDiscover returns the wire form of a PXE DHCPDISCOVER from mac, with
// the broadcast flag set; its xid is patched per send with setXID.
func buildDiscover(mac net.HardwareAddr, s discoverSpec) ([]byte, error) {
	guid := make([]byte, 17) // option 97: type 0, then a 16-byte UUID
	copy(guid[11:], mac)
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover),
		dhcpv4.WithHwAddr(mac),
		dhcpv4.WithBroadcast(true),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier(s.vendorClass())),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.Arch(s.Arch))),
		dhcpv4.WithGeneric(dhcpv4.OptionClientNetworkInterfaceIdentifier, []byte{1, 3, 16}),
		dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, guid),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter,
			dhcpv4.OptionVendorSpecificInformation, dhcpv4.OptionClassIdentifier,
			dhcpv4.OptionTFTPServerName, dhcpv4.OptionBootfileName),
	}
	d, err := dhcpv4.New(mods...)
	if err != nil {
		return nil, fmt.Errorf("build discover for %s: %w", mac, err)
	}
	if s.Giaddr != nil { // as a relay agent forwards it: giaddr set, one hop
		d.GatewayIPAddr, d.HopCount = s.Giaddr, 1
	}
	return d.ToBytes(), nil
}

// setXID writes xid into a DHCP packet built by buildDiscover.
func setXID(pkt []byte, xid uint32) { binary.BigEndian.PutUint32(pkt[4:8], xid) }
