package pxe

import (
	"encoding/binary"
	"fmt"
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// DiscoverSpec is what a DISCOVER carries besides its MAC.
type DiscoverSpec struct {
	Arch        uint16 // option 93
	VendorClass string // option 60; empty: PXEClient:Arch:<arch>:UNDI:003016
	Giaddr      net.IP // relay address (nil: a direct broadcast)
	// UUID is option 97's 16 bytes as sent on the wire (SMBIOS byte order);
	// nil: zeros with the MAC in the last six bytes.
	UUID []byte
	// UserClass is option 77 as iPXE sends it ("iPXE", raw); empty: none.
	UserClass string
}

// VendorClassFor is option 60 of PXE firmware of arch: the default of
// DiscoverSpec.VendorClass.
func VendorClassFor(arch uint16) string {
	return fmt.Sprintf("PXEClient:Arch:%05d:UNDI:003016", arch)
}

func (s DiscoverSpec) vendorClass() string {
	if s.VendorClass != "" {
		return s.VendorClass
	}
	return VendorClassFor(s.Arch)
}

// BuildDiscover returns the wire form of a PXE DHCPDISCOVER from mac, with
// the broadcast flag set; its xid is patched per send with SetXID.
func BuildDiscover(mac net.HardwareAddr, s DiscoverSpec) ([]byte, error) {
	guid := make([]byte, 17) // option 97: type 0, then a 16-byte UUID
	switch {
	case s.UUID == nil:
		copy(guid[11:], mac)
	case len(s.UUID) == 16:
		copy(guid[1:], s.UUID)
	default:
		return nil, fmt.Errorf("build discover for %s: UUID has %d bytes, want 16", mac, len(s.UUID))
	}
	if len(s.UserClass) > 255 {
		return nil, fmt.Errorf("build discover for %s: user class longer than 255 bytes", mac)
	}
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
	if s.UserClass != "" {
		// Raw, not RFC 3004 length-prefixed: what iPXE sends.
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionUserClassInformation, []byte(s.UserClass)))
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

// SetXID writes xid into a DHCP packet built by BuildDiscover.
func SetXID(pkt []byte, xid uint32) { binary.BigEndian.PutUint32(pkt[4:8], xid) }
