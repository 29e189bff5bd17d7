// Package pxe is the client side of PXE DHCP that siteboot's load
// generators share (bench/dhcpload, bench/storm): building DHCPDISCOVERs
// and the DHCPREQUESTs to a proxy's port 4011 as PXE firmware and iPXE
// send them, decoding the replies (option 43's PXE sub-options included),
// the client socket options and the generated MAC lists. It holds no
// state; each generator runs its own loop around it.
package pxe
