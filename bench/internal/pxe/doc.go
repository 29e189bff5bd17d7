// Package pxe is the client side of PXE DHCP that siteboot's load
// generators share (bench/dhcpload, bench/storm): building DHCPDISCOVERs
// as PXE firmware and iPXE send them, decoding the replies, the client
// socket options and the generated MAC lists. It holds no state; each
// generator runs its own loop around it.
package pxe
