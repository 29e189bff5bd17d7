package discovery

import (
	"net"
	"time"
)

// Sighting is one boot request from a machine that has no live entry: what
// the DHCP proxy or the iPXE handler saw of it.
type Sighting struct {
	// MAC is the client's hardware address in lowercase colon form.
	MAC string
	// ProductUUID is the SMBIOS UUID (DHCP option 97, or iPXE's ${uuid}),
	// lowercase 8-4-4-4-12; empty when the client sent none.
	ProductUUID string
	// Arch is the client architecture as DiscoveredMachine.arch names it
	// (bios, x86_64-efi, arm64-efi, x86_64-efi-http, …); empty if unknown.
	Arch string
	// Relay is the giaddr of a relayed request; nil when it came directly.
	Relay net.IP
	// At is when it was seen.
	At time.Time
}
