// Package sockprio marks the sockets of the boot path's latency-critical
// exchanges (proxyDHCP answers, TFTP's first stage) so that the host's
// queueing discipline sends them ahead of bulk HTTP streams.
//
// A boot storm is mostly kernels and initrds: hundreds of TCP streams
// that fill the interface's queue. A firmware's DHCP answer or TFTP block
// that waits behind them costs a whole round trip of a lock-step
// protocol, and firmware retransmits only after seconds. Linux's default
// queueing discipline (pfifo_fast, and mq's per-queue pfifo_fast) has
// three bands by skb priority: SO_PRIORITY 6 (TC_PRIO_INTERACTIVE) goes
// to band 0, sent before band 1 where TCP streams wait. fq_codel, the
// other common default, gives new sparse flows precedence on its own;
// the DSCP marks also let a switch that honours them do the same.
package sockprio

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Classes: what IP_TOS / IPV6_TCLASS carry.
const (
	// NetworkControl is DSCP CS6, which DHCP servers (dnsmasq among them)
	// send their answers with.
	NetworkControl = 0xc0
	// LowDelay is the IPv4 "minimize delay" TOS bit (DSCP 4, as OpenSSH
	// marks interactive sessions): pfifo_fast's band 0 by itself.
	LowDelay = 0x10
)

// interactive is SO_PRIORITY's TC_PRIO_INTERACTIVE, the highest an
// unprivileged socket may set (7 needs CAP_NET_ADMIN).
const interactive = 6

// Set marks fd (an IPv4 or IPv6 UDP socket, v6 saying which) with class
// and the interactive priority. The priority is set last: IP_TOS resets
// it from the TOS byte.
func Set(fd int, v6 bool, class int) error {
	if v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, class); err != nil {
			return fmt.Errorf("IPV6_TCLASS: %w", err)
		}
	} else if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, class); err != nil {
		return fmt.Errorf("IP_TOS: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PRIORITY, interactive); err != nil {
		return fmt.Errorf("SO_PRIORITY: %w", err)
	}
	return nil
}
