package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/internal/netlab"
	"google.golang.org/protobuf/testing/protocmp"
)

// unknownWatch is how long an unknown VM is watched from power-on: long
// enough for its firmware to give up on network boot at least once.
const unknownWatch = 60 * time.Second

// TestUnknownMachineIsNeverAnswered: a machine without an entry gets its
// address from the site's DHCP server but never a proxy offer, a TFTP
// file or a script from siteboot, and `siteboot discovered ls` lists it
// with its MAC, arch and the product UUID its option 97 carried.
func TestUnknownMachineIsNeverAnswered(t *testing.T) {
	cases := []struct {
		name string
		fw   netlab.Firmware
		uuid string
		want *agentv1.DiscoveredMachine // Mac filled in by the test
	}{
		// Both firmwares send option 97 in SMBIOS byte order (see
		// TestBootWithEntry); dhcpproxy decodes it, so product_uuid is
		// QEMU's -uuid as written (and as iPXE's ${uuid} and a BMC say).
		{"bios", netlab.BIOS, "00112233-4455-6677-8899-aabbccddeeff",
			&agentv1.DiscoveredMachine{Arch: "bios", ProductUuid: "00112233-4455-6677-8899-aabbccddeeff"}},
		{"uefi", netlab.UEFI, "8899aabb-ccdd-eeff-0011-223344556677",
			&agentv1.DiscoveredMachine{Arch: "x86_64-efi", ProductUuid: "8899aabb-ccdd-eeff-0011-223344556677"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			netlab.Require(t, netlab.NeedsDnsmasq(), netlab.NeedsVM(tc.fw))
			b := newBootLab(t, nil)
			cfg := netlab.VMConfig{Label: "unknown-" + tc.name, Firmware: tc.fw, MAC: netlab.RandomMAC(), Extra: []string{"-uuid", tc.uuid}}
			want := &agentv1.DiscoveredMachine{Mac: cfg.MAC.String(), Arch: tc.want.Arch, ProductUuid: tc.want.ProductUuid}
			b.watchUnknown(t, cfg, want)
		})
	}
}

// watchUnknown boots the VM, watches it for unknownWatch and checks what
// siteboot did and did not do.
func (b *bootLab) watchUnknown(t *testing.T, cfg netlab.VMConfig, want *agentv1.DiscoveredMachine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.lab.Context(), vmTimeout)
	defer cancel()
	mac := cfg.MAC.String()
	vm, start := b.startVM(t, cfg)
	var listed *agentv1.DiscoveredMachine
	err := waitUntil(ctx, vm, func() bool {
		if listed == nil {
			listed = b.app.discovered(ctx, mac)
		}
		return listed != nil && time.Since(start) >= unknownWatch
	})
	if err != nil {
		t.Fatalf("unknown VM %s: %v (listed: %v)", mac, err, listed)
	}
	listed = b.app.discovered(ctx, mac)
	t.Logf("discovered ls after %v: %v", time.Since(start).Round(time.Second), listed)
	if listed.GetCount() < 1 || listed.GetFirstSeen() == nil || listed.GetLastSeen() == nil {
		t.Errorf("discovered %s: count %d, first %v, last %v: want a count and both times", mac, listed.GetCount(), listed.GetFirstSeen(), listed.GetLastSeen())
	}
	got := &agentv1.DiscoveredMachine{Mac: listed.GetMac(), Arch: listed.GetArch(), ProductUuid: listed.GetProductUuid(), Relay: listed.GetRelay()}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("discovered ls entry (-want +got):\n%s", diff)
	}
	b.checkNeverAnswered(ctx, t, mac)
}

// discovered returns the `siteboot discovered ls -o json` entry for mac.
func (a *appliance) discovered(ctx context.Context, mac string) *agentv1.DiscoveredMachine {
	a.t.Helper()
	var resp sitebootv1.ListDiscoveredResponse
	a.cliJSON(ctx, &resp, "discovered", "ls")
	for _, m := range resp.GetMachines() {
		if m.GetMac() == mac {
			return m
		}
	}
	return nil
}

// checkNeverAnswered: no offer, ack, TFTP transfer or script for the VM;
// dnsmasq did offer it an address.
func (b *bootLab) checkNeverAnswered(ctx context.Context, t *testing.T, mac string) {
	t.Helper()
	m := b.app.mustScrape(ctx)
	got := map[string]float64{
		"dhcp offer":        m.value("siteboot_dhcp_requests_total", "result=offer"),
		"dhcp ack":          m.value("siteboot_dhcp_requests_total", "result=ack"),
		"tftp transfers":    m.value("siteboot_tftp_transfers_total"),
		"ipxe scripts":      m.value("siteboot_ipxe_scripts_total"),
		"unknown-mac (≥ 1)": min(m.value("siteboot_dhcp_requests_total", "result=unknown-mac"), 1),
	}
	want := map[string]float64{"dhcp offer": 0, "dhcp ack": 0, "tftp transfers": 0, "ipxe scripts": 0, "unknown-mac (≥ 1)": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("siteboot metrics (-want +got):\n%s\nsiteboot_dhcp_requests_total: %v", diff, m.nonZero("siteboot_dhcp_requests_total"))
	}
	ip := b.leasedIP(mac)
	if ip == "" {
		t.Errorf("dnsmasq never offered %s an address:\n%s", mac, tailFile(b.dnsmasq.LogFile, 2048))
	}
	var answered []string
	for _, l := range b.app.logs() {
		switch {
		case l.str("msg") == msgDHCP && l.str("mac") == mac && l.str("decision") != "unknown-mac" && !strings.HasPrefix(l.str("decision"), "ignored"):
			answered = append(answered, l.compact())
		case (l.str("msg") == msgScript || l.str("msg") == msgBootstrap) && (l.str("mac") == mac || (ip != "" && l.str("remote") == ip)):
			answered = append(answered, l.compact())
		}
	}
	if len(answered) > 0 {
		t.Errorf("siteboot answered the unknown machine %s (%s):\n%s", mac, ip, strings.Join(answered, "\n"))
	}
	decisions := filterLog(b.app.logs(), msgDHCP, map[string]string{"mac": mac, "decision": "unknown-mac"})
	t.Logf("unknown VM %s got %s from dnsmasq; siteboot logged %d unknown-mac decisions, metrics %v", mac, ip, len(decisions), m.nonZero("siteboot_dhcp_requests_total"))
}

func tailFile(path string, n int) string {
	data, _ := os.ReadFile(path)
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}
