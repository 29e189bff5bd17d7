package e2e

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/internal/netlab"
)

// iPXE builds from Debian's ipxe package, used as ramdisk "kernels": BIOS
// iPXE boots a bzImage (ipxe.lkrn), EFI iPXE an EFI application
// (ipxe.efi), so `kernel` succeeds and the script goes on to `initrd`.
const (
	lkrnFile = "/usr/lib/ipxe/ipxe.lkrn"
	efiFile  = "/usr/lib/ipxe/ipxe.efi"
	isoFile  = "/usr/lib/ipxe/ipxe.iso"
)

// bootCase is one firmware booting a machine that has a ramdisk entry.
type bootCase struct {
	name   string
	fw     netlab.Firmware
	kernel string
	uuid   string
	want   bootSeen
}

// bootSeen is what siteboot and the origin saw of one machine's boot.
type bootSeen struct {
	// OfferFiles are the boot files of siteboot's DHCP answers to the MAC,
	// each once, in order.
	OfferFiles []string
	// TFTP are siteboot's successful TFTP transfers, by file name.
	TFTP []string
	// Script is the /ipxe answer: result, buildarch, platform, and the
	// uuid iPXE put in the query (its ${uuid}).
	Script []string
	// Opt97 are the distinct option 97 values (hex) the VM sent.
	Opt97 []string
	// Fetched are the origin paths the script's remote fetched, in order.
	Fetched []string
}

// TestBootWithEntry: a machine with a live ramdisk entry boots through
// siteboot's proxy offer, (for UEFI) its TFTP first stage, /boot.ipxe and
// /ipxe to the kernel and initrd of the ramdisk profile; success is seen
// by the origin server on another host.
func TestBootWithEntry(t *testing.T) {
	for _, tc := range bootCases() {
		t.Run(tc.name, func(t *testing.T) { testBootWithEntry(t, tc) })
	}
}

// bootCases are the firmware TestBootWithEntry boots, each with what it
// must be seen doing.
func bootCases() []bootCase {
	return []bootCase{
		{
			name: "bios", fw: netlab.BIOS, kernel: lkrnFile, uuid: "00112233-4455-6677-8899-aabbccddeeff",
			want: bootSeen{
				OfferFiles: []string{"{base}/boot.ipxe"},
				Script:     []string{"ramdisk", "i386", "pcbios"},
				Fetched:    []string{kernelPath, initrdPath},
			},
		},
		{
			name: "uefi", fw: netlab.UEFI, kernel: efiFile, uuid: "8899aabb-ccdd-eeff-0011-223344556677",
			want: bootSeen{
				OfferFiles: []string{"ipxe.efi", "{base}/boot.ipxe"},
				TFTP:       []string{"ipxe.efi"},
				Script:     []string{"ramdisk", "x86_64", "efi"},
				Fetched:    []string{kernelPath, initrdPath},
			},
		},
	}
}

func testBootWithEntry(t *testing.T, tc bootCase) {
	netlab.Require(t, netlab.NeedsDnsmasq(), netlab.NeedsVM(tc.fw), netlab.Needs{Files: []string{tc.kernel}})
	kernel, err := os.ReadFile(tc.kernel)
	if err != nil {
		t.Fatal(err)
	}
	initrd := bytes.Repeat([]byte("siteboot e2e initrd\n"), 512)
	b := newBootLab(t, map[string][]byte{kernelPath: kernel, initrdPath: initrd})
	bootWithEntry(t, b, tc)
}

// bootWithEntry adds an entry for a new VM's MAC through the CLI, boots the
// VM with tc's firmware and checks what siteboot, the origin and the
// site's DHCP server saw of the boot. It returns the VM, still running.
func bootWithEntry(t *testing.T, b *bootLab, tc bootCase) *netlab.VM {
	ctx, cancel := context.WithTimeout(b.lab.Context(), vmTimeout)
	defer cancel()
	mac := netlab.RandomMAC()
	b.app.mustCLI(ctx, "entry", "add", "--node-id", "node-"+tc.name, "--mac", mac.String(), "--ttl", "1h")

	vm, start := b.startVM(t, netlab.VMConfig{Label: tc.name, Firmware: tc.fw, MAC: mac, Extra: []string{"-uuid", tc.uuid}})
	var remote string
	err := waitUntil(ctx, vm, func() bool {
		var ok bool
		remote, _, ok = b.origin.fetchedInOrder(kernelPath, initrdPath)
		return ok
	})
	if err != nil {
		t.Fatalf("%s VM %s: the origin saw no kernel and initrd fetch: %v", tc.name, mac, err)
	}
	got := b.seen(mac.String(), remote)
	if diff := cmp.Diff(tc.expected(b.app.base), got); diff != "" {
		t.Errorf("%s boot of %s (-want +got):\n%s\nsiteboot:\n%s", tc.name, mac, diff, b.app.logDigest(40))
	}
	b.checkBootMetrics(ctx, t, tc)
	b.checkVMAddress(t, mac.String(), remote)
	b.reportBootFacts(t, tc, mac.String(), remote, start)
	return vm
}

// expected is tc.want completed with the appliance's base URL and the
// UUID facts observed here: iPXE's ${uuid} is QEMU's -uuid as written,
// while every firmware (SeaBIOS's iPXE ROM, edk2, EFI iPXE) sends option
// 97 in SMBIOS byte order, the first three fields little-endian.
func (tc bootCase) expected(base string) bootSeen {
	want := tc.want
	_, smbios := uuidForms(tc.uuid)
	want.Script = append(slices.Clone(want.Script), tc.uuid)
	want.Opt97 = []string{smbios}
	want.OfferFiles = nil
	for _, f := range tc.want.OfferFiles {
		want.OfferFiles = append(want.OfferFiles, strings.ReplaceAll(f, "{base}", base))
	}
	return want
}

// seen collects what siteboot logged for mac and what the origin saw from
// remote (the address the script's fetches came from).
func (b *bootLab) seen(mac, remote string) bootSeen {
	var s bootSeen
	logs := b.app.logs()
	for _, l := range filterLog(logs, msgDHCP, map[string]string{"mac": mac}) {
		answered := l.str("decision") == "offer" || l.str("decision") == "ack"
		if f := l.str("file"); answered && !slices.Contains(s.OfferFiles, f) {
			s.OfferFiles = append(s.OfferFiles, f)
		}
	}
	for _, l := range filterLog(logs, msgTFTP, map[string]string{"result": "ok", "op": "read"}) {
		if !slices.Contains(s.TFTP, l.str("file")) {
			s.TFTP = append(s.TFTP, l.str("file"))
		}
	}
	if scripts := filterLog(logs, msgScript, map[string]string{"mac": mac}); len(scripts) > 0 {
		l := scripts[0]
		s.Script = []string{l.str("result"), l.str("buildarch"), l.str("platform"), l.str("uuid")}
	}
	for _, r := range b.sniff.requests(mac) {
		if !slices.Contains(s.Opt97, r.UUID) {
			s.Opt97 = append(s.Opt97, r.UUID)
		}
	}
	for _, h := range b.origin.requests() {
		if h.Remote == remote && h.Method == "GET" && h.Status == 200 && !slices.Contains(s.Fetched, h.Path) {
			s.Fetched = append(s.Fetched, h.Path)
		}
	}
	return s
}

// checkBootMetrics: siteboot's own counters agree with what the VM did.
func (b *bootLab) checkBootMetrics(ctx context.Context, t *testing.T, tc bootCase) {
	t.Helper()
	m := b.app.mustScrape(ctx)
	checks := []counterCheck{
		{"siteboot_dhcp_requests_total{type=discover,result=offer}", m.value("siteboot_dhcp_requests_total", "type=discover", "result=offer"), 1},
		{"siteboot_ipxe_scripts_total{kind=bootstrap}", m.value("siteboot_ipxe_scripts_total", "kind=bootstrap"), 1},
		{"siteboot_ipxe_scripts_total{kind=ramdisk}", m.value("siteboot_ipxe_scripts_total", "kind=ramdisk"), 1},
	}
	if tc.fw == netlab.UEFI {
		checks = append(checks, counterCheck{"siteboot_tftp_transfers_total{result=ok}", m.value("siteboot_tftp_transfers_total", "result=ok"), 1})
	}
	for _, c := range checks {
		if c.got < c.atLeast {
			t.Errorf("%s = %g, want ≥ %g", c.name, c.got, c.atLeast)
		}
	}
	if n := m.value("siteboot_ipxe_scripts_total", "kind=unknown"); n != 0 {
		t.Errorf("siteboot_ipxe_scripts_total{kind=unknown} = %g, want 0 (the only VM has an entry)", n)
	}
	t.Logf("siteboot_dhcp_requests_total: %v", m.nonZero("siteboot_dhcp_requests_total"))
	t.Logf("siteboot_tftp_transfers_total: %v", m.nonZero("siteboot_tftp_transfers_total"))
	t.Logf("siteboot_ipxe_scripts_total: %v", m.nonZero("siteboot_ipxe_scripts_total"))
}

// counterCheck is a counter that must have reached a minimum.
type counterCheck struct {
	name    string
	got     float64
	atLeast float64
}

// checkVMAddress: the fetches came from the address the site's DHCP
// server gave the VM, and siteboot served /ipxe to that address.
func (b *bootLab) checkVMAddress(t *testing.T, mac, remote string) {
	t.Helper()
	leased := b.leasedIP(mac)
	var scriptRemote string
	if scripts := filterLog(b.app.logs(), msgScript, map[string]string{"mac": mac}); len(scripts) > 0 {
		scriptRemote = scripts[0].str("remote")
	}
	if diff := cmp.Diff([]string{leased, leased}, []string{remote, scriptRemote}); diff != "" {
		t.Errorf("dnsmasq leased %s to %s; origin fetches and /ipxe remote (-want +got):\n%s", leased, mac, diff)
	}
}

// reportBootFacts logs the timings and the option 97 each firmware sent.
func (b *bootLab) reportBootFacts(t *testing.T, tc bootCase, mac, remote string, start time.Time) {
	logs := b.app.logs()
	since := func(msg string, kv map[string]string) string {
		if l := filterLog(logs, msg, kv); len(l) > 0 {
			return l[0].at().Sub(start).Round(100 * time.Millisecond).String()
		}
		return "never"
	}
	_, kernelAt, _ := b.origin.fetchedInOrder(kernelPath)
	t.Logf("%s from power-on: first proxy offer %s, first TFTP ok %s, /boot.ipxe %s, /ipxe script %s, kernel fetched %v",
		tc.name, since(msgDHCP, map[string]string{"mac": mac, "decision": "offer"}),
		since(msgTFTP, map[string]string{"result": "ok"}), since(msgBootstrap, map[string]string{"remote": remote}),
		since(msgScript, map[string]string{"mac": mac}), kernelAt.Sub(start).Round(100*time.Millisecond))
	written, smbios := uuidForms(tc.uuid)
	t.Logf("%s -uuid %s: option 97 would be %s as written, %s in SMBIOS order", tc.name, tc.uuid, written, smbios)
	for _, r := range b.sniff.requests(mac) {
		t.Logf("  %s %s class=%q arch=%d user=%q opt97=%q", r.At.Sub(start).Round(100*time.Millisecond), r.Type, r.VendorClass, r.Arch, r.UserClass, r.UUID)
	}
}
