package ipmisim

import (
	"fmt"
	"net/netip"
	"strings"
)

// emuFile makes MC 0x20 the BMC: a device with chassis support, no
// device SDRs.
const emuFile = `mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02
mc_enable 0x20
`

// lanConf is ipmi_sim's configuration: one LAN channel on addr with a
// guid (lanplus needs it), the chassis program, and one admin user.
func lanConf(cfg Config, addr netip.AddrPort, program string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name \"ipmisim\"\nset_working_mc 0x20\n")
	fmt.Fprintf(&b, "  startlan 1\n    addr %s %d\n    priv_limit admin\n", addr.Addr(), addr.Port())
	for _, who := range []string{"callback", "user", "operator", "admin"} {
		fmt.Fprintf(&b, "    allowed_auths_%s md2 md5 straight\n", who)
	}
	fmt.Fprintf(&b, "    guid a123456789abcdefa123456789abcdef\n  endlan\n")
	fmt.Fprintf(&b, "  chassis_control %q\n", program)
	fmt.Fprintf(&b, "  user 2 true %q %q admin 10 md2 md5 straight\n", cfg.User, cfg.Password)
	return b.String()
}

// wrapperScript is the chassis program: it re-executes the test binary,
// which ChassisMain turns into a client of the Sim's socket. -test.run=^$
// keeps a binary without ChassisMain from running its tests; GORACE
// drops the race detector's one-second sleep at exit.
func wrapperScript(exe, socket string) string {
	return fmt.Sprintf("#!/bin/sh\nGORACE=atexit_sleep_ms=0 %s=%s exec %s -test.run='^$' \"$@\"\n",
		envSocket, shellQuote(socket), shellQuote(exe))
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
