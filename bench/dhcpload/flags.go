package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// Caps that keep any run bounded, whatever the flags say.
const (
	maxDuration    = 10 * time.Minute
	maxRate        = 200_000
	maxOutstanding = 4096
	maxRequests    = 50_000_000
	maxTimeout     = 10 * time.Second
)

// options are the command-line flags.
type options struct {
	Server      string
	Listen      string
	Iface       string
	MACFile     string
	MACPrefix   string
	MACCount    int
	PrintMACs   bool
	Rate        float64
	Outstanding int
	Duration    time.Duration
	Requests    uint64
	Timeout     time.Duration
	Arch        uint
	VendorClass string
	Giaddr      string
	ServerID    string
	Label       string
	JSON        bool
}

const usageHead = `dhcpload: send PXE DHCPDISCOVERs from many MACs and measure the proxy offers.

Run it inside a network namespace next to the server under test (it binds
UDP 68 and broadcasts). Closed-loop by default (-outstanding K in flight);
-rate R switches to open-loop (R requests/s on a fixed schedule).

Examples:
  dhcpload -mac-prefix 02:5b -mac-count 10000 -outstanding 32 -duration 10s
  dhcpload -mac-prefix 02:5b -mac-count 10000 -rate 1000 -duration 10s -json
  dhcpload -mac-prefix 02:5b -mac-count 10000 -print-macs > macs.txt

Flags:
`

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("dhcpload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageHead); fs.PrintDefaults() }
	fs.StringVar(&o.Server, "server", "255.255.255.255:67", "where DISCOVERs go (broadcast, or a server's ip:port for relayed requests)")
	fs.StringVar(&o.Listen, "listen", "0.0.0.0:68", "local address to bind (use :67 with -giaddr: servers answer relays on port 67)")
	fs.StringVar(&o.Iface, "iface", "", "bind the socket to this interface (SO_BINDTODEVICE)")
	fs.StringVar(&o.MACFile, "macs", "", "file with one client MAC per line (# comments allowed); overrides -mac-prefix/-mac-count")
	fs.StringVar(&o.MACPrefix, "mac-prefix", "02:5b", "generated MACs: this prefix (1-5 bytes) then the index big-endian")
	fs.IntVar(&o.MACCount, "mac-count", 1000, fmt.Sprintf("how many MACs to generate (max %d)", maxMACs))
	fs.BoolVar(&o.PrintMACs, "print-macs", false, "print the MAC list and exit (to configure the server under test)")
	fs.Float64Var(&o.Rate, "rate", 0, fmt.Sprintf("open-loop requests per second (max %d); 0 = closed-loop", maxRate))
	fs.IntVar(&o.Outstanding, "outstanding", 32, fmt.Sprintf("closed-loop requests in flight (max %d)", maxOutstanding))
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, fmt.Sprintf("how long to send (max %v)", maxDuration))
	fs.Uint64Var(&o.Requests, "requests", 0, fmt.Sprintf("stop after this many requests (0 = duration only; max %d)", maxRequests))
	fs.DurationVar(&o.Timeout, "timeout", time.Second, fmt.Sprintf("a request unanswered this long is lost (max %v)", maxTimeout))
	fs.UintVar(&o.Arch, "arch", 7, "option 93 client architecture (0 BIOS, 7 x86-64 UEFI, 11 ARM64 UEFI, …)")
	fs.StringVar(&o.VendorClass, "vendor-class", "", "option 60 (default PXEClient:Arch:<arch>:UNDI:003016)")
	fs.StringVar(&o.Giaddr, "giaddr", "", "relay agent address to put in giaddr (simulates a relay)")
	fs.StringVar(&o.ServerID, "server-id", "", "count only proxy offers whose option 54 is this address")
	fs.StringVar(&o.Label, "label", "", "name of the run, printed in the report")
	fs.BoolVar(&o.JSON, "json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, o.validate()
}

func (o options) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(o.Rate >= 0 && o.Rate <= maxRate, "-rate %v: want 0..%d", o.Rate, maxRate)
	check(o.Outstanding >= 1 && o.Outstanding <= maxOutstanding, "-outstanding %d: want 1..%d", o.Outstanding, maxOutstanding)
	check(o.Duration > 0 && o.Duration <= maxDuration, "-duration %v: want (0, %v]", o.Duration, maxDuration)
	check(o.Requests <= maxRequests, "-requests %d: want at most %d", o.Requests, maxRequests)
	check(o.Timeout > 0 && o.Timeout <= maxTimeout, "-timeout %v: want (0, %v]", o.Timeout, maxTimeout)
	check(o.Arch <= 0xffff, "-arch %d: want 0..65535", o.Arch)
	check(len(o.VendorClass) <= 255, "-vendor-class: longer than 255 bytes")
	if o.Giaddr != "" {
		a, err := netip.ParseAddr(o.Giaddr)
		check(err == nil && a.Is4(), "-giaddr %q: want an IPv4 address", o.Giaddr)
	}
	if o.ServerID != "" {
		a, err := netip.ParseAddr(o.ServerID)
		check(err == nil && a.Is4(), "-server-id %q: want an IPv4 address", o.ServerID)
	}
	if _, err := net.ResolveUDPAddr("udp4", o.Server); err != nil || !isLiteral(o.Server) {
		errs = append(errs, fmt.Errorf("-server %q: want ip:port", o.Server))
	}
	return errors.Join(errs...)
}

func isLiteral(hostport string) bool {
	_, err := netip.ParseAddrPort(hostport)
	return err == nil
}
