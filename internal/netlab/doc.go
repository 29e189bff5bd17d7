// Package netlab is the end-to-end test bed: a private LAN built from Linux
// network namespaces, with real processes (dnsmasq, QEMU, DHCP clients) and
// Go sockets placed on its hosts.
//
// A Lab owns one switch namespace holding a bridge (stp_state 0,
// forward_delay 0) and one namespace per host, each joined to the bridge by a
// veth pair whose host end is eth0 with an address from the lab's private
// /24 and a 255.255.255.255/32 route, so that limited broadcasts (DHCP
// replies, RFC 2131 §4.1) have somewhere to go. QEMU virtual machines sit in
// the switch namespace on taps enslaved to the bridge and boot from the
// network with SeaBIOS + iPXE or with OVMF (edk2's PXE client, RFC 4578
// arch 7). dnsmasq plays the site's ordinary DHCP server.
//
// Everything is named "sbt-" + six hex digits + a suffix, so parallel runs
// cannot collide, and each lab holds an flock on /run/sbt-netlab/<id>.lock
// for its lifetime: CleanupStale removes the namespaces of labs whose owner
// is gone. Teardown is registered with t.Cleanup and also runs when a test
// fails; each child process runs in a pid namespace of its own whose init
// dies with the test binary, so a binary killed by a timeout leaves no
// process behind, only namespaces that the next run's CleanupStale removes.
//
// Tests call Require first: without root or the needed binaries it skips
// with the reason, or fails when SITEBOOT_E2E=require. Traffic never leaves
// the namespaces a lab created. docs/testing.md describes the lab.
package netlab
