// Package dhcpproxy is siteboot's proxyDHCP server: it answers PXE and UEFI
// HTTP-boot clients on UDP 67 and on the PXE boot-server port, UDP 4011,
// with the boot file they should fetch, but only for machines the site holds
// a live entry for and only while this appliance holds the boot lease. It
// never hands out addresses (yiaddr is always 0); the site's own DHCP server
// does that. Machines it does not answer are reported to a discovery sink.
//
// The package owns the decision (Server.Handle: which packets get which
// reply, sent where) and the sockets it needs (one per interface and port,
// bound to the device so the arrival interface is known).
//
// It implements the proxyDHCP behaviour of the PXE specification 2.1 on top
// of DHCP (RFC 2131, RFC 2132), the client options of RFC 4578 (options 93,
// 94 and 97) with the IANA processor-architecture registry, the user class
// of RFC 3004 (option 77), relay agent information of RFC 3046 (option 82),
// and UEFI HTTP boot (option 60 "HTTPClient", UEFI specification 2.x,
// "HTTP Boot"). The entries it answers for are
// bettercompute.site.v1.ProxyDhcpEntry, read through package bootentry.
package dhcpproxy
