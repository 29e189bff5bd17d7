package netlab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DnsmasqConfig describes a dnsmasq instance: by default the site's ordinary
// DHCP server (addresses only, DNS off).
type DnsmasqConfig struct {
	// Label names its files in the lab dir. Default "dnsmasq".
	Label string
	// RangeStart and RangeEnd bound the address pool. Default .100-.199 of
	// the lab subnet. Both zero and Proxy set: no pool, proxy mode.
	RangeStart, RangeEnd netip.Addr
	// LeaseTime is the lease length. Default 1h.
	LeaseTime time.Duration
	// Proxy runs dnsmasq as a proxy DHCP server ("dhcp-range=<net>,proxy")
	// instead of handing out addresses.
	Proxy bool
	// Ping keeps dnsmasq's ICMP check of an address before offering it,
	// which delays every first offer by about 3 s; off by default because
	// the lab knows its addresses are free.
	Ping bool
	// Extra are further command-line options, for example
	// "--enable-tftp", "--dhcp-boot=tag:ipxe,http://…".
	Extra []string
}

// Dnsmasq is a running dnsmasq.
type Dnsmasq struct {
	*Process
	// LogFile receives dnsmasq's log, including --log-dhcp detail.
	LogFile string
	// LeaseFile is dnsmasq's lease database.
	LeaseFile string
}

// StartDnsmasq starts dnsmasq on the host's eth0 (DNS disabled, bound to
// that interface only) and waits until it has started. Require
// NeedsDnsmasq() first.
func (h *Host) StartDnsmasq(cfg DnsmasqConfig) *Dnsmasq {
	h.lab.t.Helper()
	cfg = h.dnsmasqDefaults(cfg)
	d := &Dnsmasq{
		LogFile:   filepath.Join(h.lab.dir, cfg.Label+"-dhcp.log"),
		LeaseFile: filepath.Join(h.lab.dir, cfg.Label+".leases"),
	}
	args := h.dnsmasqArgs(cfg, d)
	d.Process = h.Start(cfg.Label, "dnsmasq", args...)
	h.lab.t.Cleanup(func() {
		if h.lab.t.Failed() {
			b, _ := os.ReadFile(d.LogFile)
			h.lab.t.Logf("netlab: %s log (last 8 KiB):\n%s", d.LogFile, tail(string(b), 8192))
		}
	})
	ctx, cancel := context.WithTimeout(h.lab.ctx, 10*time.Second)
	defer cancel()
	if _, err := WaitFile(ctx, d.LogFile, "started, version"); err != nil {
		h.lab.t.Fatalf("netlab: dnsmasq did not start: %v\n%s", err, d.Output())
	}
	return d
}

func (h *Host) dnsmasqDefaults(cfg DnsmasqConfig) DnsmasqConfig {
	if cfg.Label == "" {
		cfg.Label = "dnsmasq"
	}
	if !cfg.RangeStart.IsValid() && !cfg.Proxy {
		cfg.RangeStart, cfg.RangeEnd = h.lab.Addr(100), h.lab.Addr(199)
	}
	if cfg.LeaseTime <= 0 {
		cfg.LeaseTime = time.Hour
	}
	return cfg
}

func (h *Host) dnsmasqArgs(cfg DnsmasqConfig, d *Dnsmasq) []string {
	args := []string{
		"--conf-file=/dev/null",
		"--keep-in-foreground",
		"--port=0",
		"--user=root",
		"--interface=" + Iface,
		"--bind-interfaces",
		"--log-dhcp",
		"--log-facility=" + d.LogFile,
		"--dhcp-leasefile=" + d.LeaseFile,
		"--pid-file=" + filepath.Join(h.lab.dir, cfg.Label+".pid"),
	}
	if !cfg.Ping {
		args = append(args, "--no-ping")
	}
	if cfg.Proxy {
		args = append(args, "--dhcp-range="+h.lab.Subnet().Masked().Addr().String()+",proxy")
	}
	if cfg.RangeStart.IsValid() {
		secs := strconv.Itoa(int(cfg.LeaseTime / time.Second))
		args = append(args, fmt.Sprintf("--dhcp-range=%s,%s,%s", cfg.RangeStart, cfg.RangeEnd, secs))
	}
	return append(args, cfg.Extra...)
}

// Leases returns the lines of dnsmasq's lease file ("expiry mac ip name id").
func (d *Dnsmasq) Leases() []string {
	b, err := os.ReadFile(d.LeaseFile)
	if err != nil {
		return nil
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// WaitLog waits until dnsmasq's log holds a line containing all of the
// given substrings and returns that line.
func (d *Dnsmasq) WaitLog(ctx context.Context, substrs ...string) (string, error) {
	return waitFor(ctx, d.Done(), func() (string, bool) {
		b, _ := os.ReadFile(d.LogFile)
		return lineWithAll(string(b), substrs)
	}, fmt.Sprintf("%s to log %q", d.LogFile, substrs))
}

func lineWithAll(text string, substrs []string) (string, bool) {
	for _, line := range strings.Split(text, "\n") {
		ok := true
		for _, s := range substrs {
			ok = ok && strings.Contains(line, s)
		}
		if ok && line != "" {
			return line, true
		}
	}
	return "", false
}
