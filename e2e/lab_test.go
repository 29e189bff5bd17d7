package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/netlab"
)

// vmTimeout bounds each VM's boot (16-22 s to the script under TCG on
// these machines; docs/testing.md).
const vmTimeout = 3 * time.Minute

// bootLab is the site: dnsmasq as its ordinary DHCP server, siteboot on
// its own host, an origin HTTP server and a DHCP sniffer on two others.
type bootLab struct {
	lab     *netlab.Lab
	dnsmasq *netlab.Dnsmasq
	app     *appliance
	origin  *origin
	sniff   *sniffer
}

// Paths the origin serves.
const (
	kernelPath = "/vmlinuz"
	initrdPath = "/initrd"
	isoPath    = "/ipxe.iso"
)

// newBootLab builds the site; files are what the origin serves.
func newBootLab(t *testing.T, files map[string][]byte) *bootLab {
	t.Helper()
	return newBootLabWith(t, files, startAppliance)
}

// applianceStarter starts siteboot on a lab host and waits until it is ready.
type applianceStarter func(t *testing.T, h *netlab.Host, cfg applianceConfig) *appliance

// newBootLabWith is newBootLab with siteboot started by start.
func newBootLabWith(t *testing.T, files map[string][]byte, start applianceStarter) *bootLab {
	t.Helper()
	lab := netlab.New(t, netlab.Config{})
	dhcp, boot, web, sniff := lab.AddHost("dhcp"), lab.AddHost("boot"), lab.AddHost("web"), lab.AddHost("sniff")
	b := &bootLab{lab: lab, origin: startOrigin(t, web, files), sniff: startSniffer(t, sniff)}
	b.dnsmasq = dhcp.StartDnsmasq(netlab.DnsmasqConfig{})
	b.app = start(t, boot, applianceConfig{
		KernelURL: b.origin.base + kernelPath, InitrdURL: b.origin.base + initrdPath,
	})
	return b
}

// startVM boots a VM and arranges that a failure leaves a screendump and
// siteboot's recent decisions in the test log.
func (b *bootLab) startVM(t *testing.T, cfg netlab.VMConfig) (*netlab.VM, time.Time) {
	t.Helper()
	vm := b.lab.StartVM(cfg)
	start := time.Now()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		select {
		case <-vm.Done():
			// Stopped by the test (or crashed: its log says): no screen.
			t.Logf("VM %s (%s) exited: %v", cfg.Label, vm.MAC, vm.Err())
		default:
			screendump(t, vm, b.lab.ID(), cfg.Label)
		}
		t.Logf("siteboot's last decisions:\n%s", b.app.logDigest(60))
		t.Logf("origin requests:\n%s", b.origin.report())
	})
	return vm, start
}

// screendump saves a running VM's screen for a failure report.
func screendump(t *testing.T, vm *netlab.VM, labID, label string) {
	shot := filepath.Join(os.TempDir(), fmt.Sprintf("sbt-e2e-%s-%s-%d.ppm", labID, label, time.Now().Unix()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := vm.Screendump(ctx, shot); err != nil {
		t.Logf("VM %s (%s): screendump failed: %v", label, vm.MAC, err)
	} else {
		t.Logf("VM %s (%s): screen saved to %s (convert it to PNG to look)", label, vm.MAC, shot)
	}
}

// leasedIP returns the address dnsmasq gave mac, from its log.
func (b *bootLab) leasedIP(mac string) string {
	data, _ := os.ReadFile(b.dnsmasq.LogFile)
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		for i := 0; i+2 < len(f); i++ {
			if strings.HasPrefix(f[i], "DHCPOFFER(") && f[i+2] == mac {
				return f[i+1]
			}
		}
	}
	return ""
}

// waitUntil polls cond every 200 ms until it holds, ctx ends or vm exits.
func waitUntil(ctx context.Context, vm *netlab.VM, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-vm.Done():
			return fmt.Errorf("qemu exited: %v", vm.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// uuidForms returns option 97 as a client sends it for QEMU's -uuid u: the
// RFC 4578 type byte 0, then the 16 bytes either in the order written
// (big-endian fields) or as SMBIOS stores them (first three fields
// little-endian).
func uuidForms(u string) (written, smbios string) {
	h := strings.ReplaceAll(u, "-", "")
	swap := func(s string) string {
		var b strings.Builder
		for i := len(s) - 2; i >= 0; i -= 2 {
			b.WriteString(s[i : i+2])
		}
		return b.String()
	}
	return "00" + h, "00" + swap(h[0:8]) + swap(h[8:12]) + swap(h[12:16]) + h[16:]
}
