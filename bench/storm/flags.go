package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/siteboot/siteboot/bench/internal/pxe"
)

// Caps that keep any run bounded, whatever the flags say.
const (
	maxMachines       = 5000
	maxWindow         = 10 * time.Minute
	maxRunTimeout     = 30 * time.Minute
	maxMachineTimeout = 30 * time.Minute
	maxSrcIPs         = 65536
	maxScriptBytes    = 1 << 20
)

// options are the command-line flags.
type options struct {
	N               int
	Window          time.Duration
	BIOS            float64
	UEFIHTTP        bool
	MACPrefix       string
	Seed            uint64
	DHCPServer      string
	DHCPListen      string
	PXEListen       string
	PXEPort         int
	Iface           string
	SrcIPs          string
	TFTPPort        int
	BlkSize         int
	TFTPTimeout     time.Duration
	TFTPTries       int
	TFTPProbe       bool
	UEFIWindow      int
	BulkNice        int
	BulkInline      bool
	PXETimeouts     string
	IPXETimeouts    string
	PXEReqTimeouts  string
	IPXEReqTimeouts string
	IPXEBSTimeouts  string
	TimeScale       float64
	RcvBuf          int
	CopyBodies      bool
	HTTPIdle        time.Duration
	KernelSHA256    string
	InitrdSHA256    string
	Concurrency     int
	MachineTimeout  time.Duration
	Timeout         time.Duration
	Label           string
	JSON            bool
	PrintMachines   bool
}

const usageHead = `storm: N machines booting at once as PXE firmware and iPXE do.

Each machine: PXE DISCOVER -> proxy offer (and, when the offer does not
name the boot file, a request to the proxy's or boot server's port 4011 as
PXE firmware sends it), the first stage by TFTP (or HTTP for UEFI HTTP
boot), iPXE DISCOVER -> script URL (and iPXE's ProxyDHCPREQUEST to port 4011
when the offer has no next server and file, or BIOS iPXE's boot server
request when it has a PXE menu), /boot.ipxe and what it chains, then the
kernel and initrd the script names. Run it in a network namespace
next to the server under test: it binds UDP 68 and 4011 and broadcasts.

Examples:
  storm -n 100 -window 3s -iface eth0 -src-ips 10.99.1.100-10.99.1.199
  storm -n 1000 -bios 0.3 -rcvbuf 0 -json > storm.json
  storm -n 1000 -bios 0.3 -print-machines > machines.tsv

Machine i has MAC <mac-prefix> + i big-endian (as dhcpload), a UUID derived
from -seed and i, and is BIOS for a -bios fraction of the indices.

Flags:
`

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("storm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageHead); fs.PrintDefaults() }
	fs.IntVar(&o.N, "n", 100, fmt.Sprintf("machines (max %d)", maxMachines))
	fs.DurationVar(&o.Window, "window", 3*time.Second, fmt.Sprintf("machine starts are spread evenly over this (max %v)", maxWindow))
	fs.Float64Var(&o.BIOS, "bios", 0.5, "fraction of machines that are BIOS (arch 0, undionly); the rest x86-64 UEFI (arch 7)")
	fs.BoolVar(&o.UEFIHTTP, "uefi-http", false, "UEFI machines HTTP-boot (arch 16, HTTPClient, first stage over HTTP) instead of PXE+TFTP")
	fs.StringVar(&o.MACPrefix, "mac-prefix", "02:5c", "machine MACs: this prefix (1-5 bytes) then the index big-endian")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the machines' UUIDs")
	fs.StringVar(&o.DHCPServer, "dhcp-server", "255.255.255.255:67", "where DISCOVERs go (broadcast, or a proxy's ip:4011, which answers to the source)")
	fs.StringVar(&o.DHCPListen, "dhcp-listen", "0.0.0.0:68", "the DHCP socket all machines share")
	fs.StringVar(&o.PXEListen, "pxe-listen", "0.0.0.0:4011", "the socket firmware's requests to port 4011 go from and are answered to, shared, as edk2 binds 4011 for them; empty: the DHCP socket")
	fs.IntVar(&o.PXEPort, "pxe-port", pxe.PXEPort, "the port of proxies and boot servers that firmware's and iPXE's requests go to (PXE: 4011)")
	fs.StringVar(&o.Iface, "iface", "", "bind the DHCP sockets (-dhcp-listen, -pxe-listen) to this interface (SO_BINDTODEVICE)")
	fs.StringVar(&o.SrcIPs, "src-ips", "", "machines' own addresses: the source of TFTP, HTTP and requests to port 4011, and their ciaddr; machine i takes the (i mod count)-th: A-B ranges and CIDRs, comma-separated (they must be on a local interface); empty: the kernel's choice, and its address as ciaddr")
	fs.IntVar(&o.TFTPPort, "tftp-port", 69, "TFTP port of the next server")
	fs.IntVar(&o.BlkSize, "blksize", 1468, "TFTP blksize asked for")
	fs.DurationVar(&o.TFTPTimeout, "tftp-timeout", 4*time.Second, "TFTP wait per packet before a retransmit (edk2: 4 s)")
	fs.IntVar(&o.TFTPTries, "tftp-tries", 6, "TFTP sends of one packet in all before the transfer fails")
	fs.BoolVar(&o.TFTPProbe, "tftp-probe", true, "a tsize-only request first, aborted on the OACK, as edk2 and PXE ROMs do")
	fs.IntVar(&o.UEFIWindow, "uefi-windowsize", 4, "TFTP windowsize (RFC 7440) UEFI machines ask for, as edk2 does (PcdPxeTftpWindowSize 4); 0: none, lock step like BIOS ROMs")
	fs.StringVar(&o.PXETimeouts, "pxe-timeouts", "4s,8s,16s,32s", "firmware DISCOVER timeouts, one per send (PXE 2.1)")
	fs.StringVar(&o.IPXETimeouts, "ipxe-timeouts", "1s,2s,4s,8s", "iPXE DISCOVER timeouts, one per send")
	fs.StringVar(&o.PXEReqTimeouts, "pxe-req-timeouts", "1s,2s,3s,4s", "firmware's timeouts for its request to port 4011 (boot server discovery, or edk2's after an offer without discovery options), one per send (PXE 2.1, edk2)")
	fs.StringVar(&o.IPXEReqTimeouts, "ipxe-req-timeouts", "250ms,500ms,1s,2s", "iPXE's ProxyDHCPREQUEST timeouts, one per send (iPXE gives up after these four)")
	fs.StringVar(&o.IPXEBSTimeouts, "ipxe-bs-timeouts", "1s,2s,4s", "BIOS iPXE's boot server request timeouts when its offer has a PXE menu, one per send (iPXE gives up on the server after these three)")
	fs.Float64Var(&o.TimeScale, "timescale", 1, "multiply every DHCP (DISCOVER and 4011 request) and TFTP retransmit timeout by this (tests: 0.01)")
	fs.IntVar(&o.RcvBuf, "rcvbuf", 256<<10, "SO_RCVBUF of each HTTP connection, set before connect (iPXE: 256 KiB); 0: autotune as Linux installers and UEFI HTTP boot")
	fs.BoolVar(&o.CopyBodies, "copy-bodies", false, "copy every kernel and initrd byte out of the socket, as a machine's iPXE does into its own memory; by default the kernel drops body bytes unread (recv MSG_TRUNC), so that the client's copy does not take CPU from the server under test (-kernel-sha256 and -initrd-sha256 copy)")
	fs.DurationVar(&o.HTTPIdle, "http-idle", 30*time.Second, "an HTTP request that moves no byte for this long fails")
	fs.StringVar(&o.KernelSHA256, "kernel-sha256", "", "check every kernel against this SHA-256 (hex); costs client CPU")
	fs.StringVar(&o.InitrdSHA256, "initrd-sha256", "", "check every initrd against this SHA-256 (hex); costs client CPU")
	fs.IntVar(&o.BulkNice, "bulk-nice", 10, "nice value of the worker process that downloads every machine's kernel and initrd (0..19): each real machine has a CPU of its own, so other machines' downloads must not delay a machine's DHCP and TFTP steps")
	fs.BoolVar(&o.BulkInline, "bulk-inline", false, "download kernels and initrds in this process instead of a lower-priority worker")
	fs.IntVar(&o.Concurrency, "concurrency", 0, fmt.Sprintf("machines booting at once at most; a start waits for a free place (0: all; max %d)", maxMachines))
	fs.DurationVar(&o.MachineTimeout, "machine-timeout", 5*time.Minute, fmt.Sprintf("a machine not booted this long after its start fails (max %v)", maxMachineTimeout))
	fs.DurationVar(&o.Timeout, "timeout", 15*time.Minute, fmt.Sprintf("the whole run (max %v)", maxRunTimeout))
	fs.StringVar(&o.Label, "label", "", "name of the run, printed in the report")
	fs.BoolVar(&o.JSON, "json", false, "print the result as JSON, every machine included")
	fs.BoolVar(&o.PrintMachines, "print-machines", false, "print each machine's MAC, UUID and kind (bios, uefi, uefi-http), tab-separated, and exit (to register them with the server under test)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, o.validate()
}

var hexSHA = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (o options) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(o.N >= 1 && o.N <= maxMachines, "-n %d: want 1..%d", o.N, maxMachines)
	check(o.Window >= 0 && o.Window <= maxWindow, "-window %v: want [0, %v]", o.Window, maxWindow)
	check(o.BIOS >= 0 && o.BIOS <= 1, "-bios %v: want a fraction 0..1", o.BIOS)
	check(o.TFTPPort >= 1 && o.TFTPPort <= 65535, "-tftp-port %d: want 1..65535", o.TFTPPort)
	check(o.PXEPort >= 1 && o.PXEPort <= 65535, "-pxe-port %d: want 1..65535", o.PXEPort)
	check(o.BlkSize >= 512 && o.BlkSize <= 65464, "-blksize %d: want 512..65464", o.BlkSize)
	check(o.TFTPTimeout > 0 && o.TFTPTimeout <= time.Minute, "-tftp-timeout %v: want (0, 1m]", o.TFTPTimeout)
	check(o.TFTPTries >= 1 && o.TFTPTries <= 20, "-tftp-tries %d: want 1..20", o.TFTPTries)
	check(o.UEFIWindow >= 0 && o.UEFIWindow <= 64, "-uefi-windowsize %d: want 0..64", o.UEFIWindow)
	check(o.BulkNice >= 0 && o.BulkNice <= 19, "-bulk-nice %d: want 0..19", o.BulkNice)
	check(o.TimeScale > 0 && o.TimeScale <= 10, "-timescale %v: want (0, 10]", o.TimeScale)
	check(o.RcvBuf >= 0 && o.RcvBuf <= 64<<20, "-rcvbuf %d: want 0..%d", o.RcvBuf, 64<<20)
	check(o.HTTPIdle > 0 && o.HTTPIdle <= 10*time.Minute, "-http-idle %v: want (0, 10m]", o.HTTPIdle)
	check(o.KernelSHA256 == "" || hexSHA.MatchString(o.KernelSHA256), "-kernel-sha256: want 64 lowercase hex digits")
	check(o.InitrdSHA256 == "" || hexSHA.MatchString(o.InitrdSHA256), "-initrd-sha256: want 64 lowercase hex digits")
	check(o.Concurrency >= 0 && o.Concurrency <= maxMachines, "-concurrency %d: want 0..%d", o.Concurrency, maxMachines)
	check(o.MachineTimeout > 0 && o.MachineTimeout <= maxMachineTimeout, "-machine-timeout %v: want (0, %v]", o.MachineTimeout, maxMachineTimeout)
	check(o.Timeout > 0 && o.Timeout <= maxRunTimeout, "-timeout %v: want (0, %v]", o.Timeout, maxRunTimeout)
	for name, v := range map[string]string{"-pxe-timeouts": o.PXETimeouts, "-ipxe-timeouts": o.IPXETimeouts,
		"-pxe-req-timeouts": o.PXEReqTimeouts, "-ipxe-req-timeouts": o.IPXEReqTimeouts, "-ipxe-bs-timeouts": o.IPXEBSTimeouts} {
		if _, err := parseTimeouts(v, 1); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if _, err := parseSrcIPs(o.SrcIPs); err != nil {
		errs = append(errs, fmt.Errorf("-src-ips: %w", err))
	}
	if _, err := netip.ParseAddrPort(o.DHCPServer); err != nil {
		errs = append(errs, fmt.Errorf("-dhcp-server %q: want ip:port", o.DHCPServer))
	}
	if _, err := netip.ParseAddrPort(o.DHCPListen); err != nil {
		errs = append(errs, fmt.Errorf("-dhcp-listen %q: want ip:port", o.DHCPListen))
	}
	if _, err := netip.ParseAddrPort(o.PXEListen); err != nil && o.PXEListen != "" {
		errs = append(errs, fmt.Errorf("-pxe-listen %q: want ip:port or empty", o.PXEListen))
	}
	if _, err := pxe.GenerateMACs(o.MACPrefix, max(o.N, 1)); err != nil {
		errs = append(errs, fmt.Errorf("-mac-prefix: %w", err))
	}
	return errors.Join(errs...)
}

// parseTimeouts reads "4s,8s,16s" and scales each by scale.
func parseTimeouts(s string, scale float64) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d <= 0 || d > 2*time.Minute {
			return nil, fmt.Errorf("%q: want a comma-separated list of durations in (0, 2m]", clip(s))
		}
		out = append(out, time.Duration(float64(d)*scale))
	}
	if len(out) > 16 {
		return nil, fmt.Errorf("%d timeouts: want at most 16", len(out))
	}
	return out, nil
}

// parseSrcIPs expands "A-B,C/24" into IPv4 addresses; a prefix shorter
// than /31 leaves out its network and broadcast addresses.
func parseSrcIPs(s string) ([]netip.Addr, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []netip.Addr
	add := func(a netip.Addr) error {
		if len(out) == maxSrcIPs {
			return fmt.Errorf("more than %d addresses", maxSrcIPs)
		}
		out = append(out, a)
		return nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case strings.Contains(f, "/"):
			p, err := netip.ParsePrefix(f)
			if err != nil || !p.Addr().Is4() {
				return nil, fmt.Errorf("%q: want an IPv4 CIDR", clip(f))
			}
			p = p.Masked()
			first, last := p.Addr(), lastAddr(p)
			if p.Bits() < 31 {
				first, last = first.Next(), last.Prev()
			}
			for a := first; a.IsValid() && a.Compare(last) <= 0; a = a.Next() {
				if err := add(a); err != nil {
					return nil, err
				}
			}
		case strings.Contains(f, "-"):
			lo, hi, _ := strings.Cut(f, "-")
			a, err1 := netip.ParseAddr(lo)
			b, err2 := netip.ParseAddr(hi)
			if err1 != nil || err2 != nil || !a.Is4() || !b.Is4() || b.Less(a) {
				return nil, fmt.Errorf("%q: want first-last IPv4 addresses, first <= last", clip(f))
			}
			for ; a.IsValid() && a.Compare(b) <= 0; a = a.Next() {
				if err := add(a); err != nil {
					return nil, err
				}
			}
		default:
			a, err := netip.ParseAddr(f)
			if err != nil || !a.Is4() {
				return nil, fmt.Errorf("%q: want an IPv4 address, range or CIDR", clip(f))
			}
			if err := add(a); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	host := 32 - p.Bits()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= uint32(uint64(1)<<host - 1)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
