package pxe

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// PXEPort is where proxies and boot servers take the requests that follow
// a proxy offer (PXE 2.1 §2.2.6).
const PXEPort = 4011

// BootItem is option 43 sub-option 71 (PXE_BOOT_ITEM): the boot server
// type of the menu item chosen, and the layer asked for (0: the first).
type BootItem struct {
	Type, Layer uint16
}

// RequestSpec is a DHCPREQUEST to a proxy's or boot server's port 4011:
// PXE 2.1 boot server discovery, edk2's request after an offer without
// discovery options, or iPXE's ProxyDHCPREQUEST. It carries the
// DISCOVER's identity options (Giaddr aside: it goes by unicast) and the
// address the client has by now.
type RequestSpec struct {
	DiscoverSpec
	// Ciaddr is the client's address: servers answer to it.
	Ciaddr netip.Addr
	// ServerID is option 54: iPXE names the proxy it asks, firmware does
	// not. Invalid: none.
	ServerID netip.Addr
	// Item is option 43 sub-option 71, the menu item firmware asks a boot
	// server for; nil: none, as edk2 asks a proxy whose offer had no
	// discovery options and iPXE asks its proxy.
	Item *BootItem
	// Broadcast sets the broadcast flag: iPXE does once it has an
	// address, so that the answer is not refused for going to unicast.
	Broadcast bool
}

// BuildRequest returns the wire form of the DHCPREQUEST s describes from
// mac; its xid is patched per send with SetXID.
func BuildRequest(mac net.HardwareAddr, s RequestSpec) ([]byte, error) {
	if !s.Ciaddr.Is4() {
		return nil, fmt.Errorf("build request for %s: ciaddr %v is not an IPv4 address", mac, s.Ciaddr)
	}
	if s.ServerID.IsValid() && !s.ServerID.Is4() {
		return nil, fmt.Errorf("build request for %s: server ID %v is not an IPv4 address", mac, s.ServerID)
	}
	spec := s.DiscoverSpec
	spec.Giaddr = nil
	pkt, err := BuildDiscover(mac, spec)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	d, err := dhcpv4.FromBytes(pkt)
	if err != nil {
		return nil, fmt.Errorf("build request for %s: %w", mac, err)
	}
	d.UpdateOption(dhcpv4.OptMessageType(dhcpv4.MessageTypeRequest))
	d.ClientIPAddr = s.Ciaddr.AsSlice()
	d.Flags = 0
	if s.Broadcast {
		d.SetBroadcast()
	}
	if s.ServerID.IsValid() {
		d.UpdateOption(dhcpv4.OptServerIdentifier(s.ServerID.AsSlice()))
	}
	if s.Item != nil {
		// Sub-option 71 (type, layer, big-endian), then End, as edk2
		// encodes it.
		t, l := s.Item.Type, s.Item.Layer
		d.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionVendorSpecificInformation,
			[]byte{SubBootItem, 4, byte(t >> 8), byte(t), byte(l >> 8), byte(l), 255}))
	}
	return d.ToBytes(), nil
}
