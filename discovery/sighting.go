package discovery

import (
	"net"
	"net/netip"
	"time"
)

// Sighting is one DHCP request from a network-boot client: what the DHCP
// proxy saw of it. Ledger.Record takes those of machines without a live
// entry, Observations.Observe those of machines with one.
type Sighting struct {
	// MAC is the client's hardware address in lowercase colon form.
	MAC string
	// ProductUUID is the SMBIOS UUID of DHCP option 97, lowercase
	// 8-4-4-4-12; empty when the client sent none.
	ProductUUID string
	// Arch is the client architecture as DiscoveredMachine.arch names it
	// (bios, x86_64-efi, arm64-efi, x86_64-efi-http, …); empty if unknown.
	Arch string
	// Relay is the giaddr of a relayed request; nil when it came directly.
	Relay net.IP
	// Iface is the interface the request arrived on.
	Iface string
	// Source is what the ledger's limit on new machines is kept for: the
	// address of a configured relay the request came through. The zero
	// Addr (a direct request, or one through an on-link relay, whose
	// address a neighbour can forge) counts against Iface as a whole.
	Source netip.Addr
	// At is when it was seen.
	At time.Time
}
