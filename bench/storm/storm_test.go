package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/bench/internal/pxe"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one of them leaks a goroutine:
// every machine's sockets and connections must be gone at the end.
func TestMain(m *testing.M) {
	if os.Getenv(bulkEnv) == "1" { // the test binary as a storm's bulk worker
		bulkMain()
		return
	}
	goleak.VerifyTestMain(m)
}

// storm runs o against the site on a loopback DHCP socket of its own.
func storm(t *testing.T, o options) Result {
	t.Helper()
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenPacket("udp4", o.DHCPListen)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var pxeConn net.PacketConn
	if o.PXEListen != "" {
		if pxeConn, err = net.ListenPacket("udp4", o.PXEListen); err != nil {
			t.Fatal(err)
		}
		defer pxeConn.Close()
	}
	res, err := runStorm(context.Background(), o, conn, pxeConn)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// outcome is the part of a result the tests compare exactly.
type outcome struct {
	Machines, Done, Failed, BIOS, UEFI, UEFIHTTP int
	Failures                                     []string // step/reason×count
	StepCounts                                   map[string]int
}

func outcomeOf(r Result) outcome {
	o := outcome{Machines: r.Machines, Done: r.Done, Failed: r.Failed, BIOS: r.BIOS, UEFI: r.UEFI, UEFIHTTP: r.UEFIHTTP,
		StepCounts: map[string]int{}}
	for _, f := range r.Failures {
		o.Failures = append(o.Failures, f.Step+"/"+f.Reason+"×"+strconv.Itoa(f.Count))
	}
	for s, d := range r.Steps {
		o.StepCounts[s] = d.Count
	}
	return o
}

func allSteps(n int) map[string]int {
	m := map[string]int{stepKernelInitrd: n}
	for _, s := range stepOrder {
		m[s] = n
	}
	return m
}

func TestStormBootsEveryMachine(t *testing.T) {
	site := startFakeSite(t, faults{RequireIPXEVars: true})
	o := site.options(10)
	o.SrcIPs = "127.0.0.10-127.0.0.14"
	res := storm(t, o)
	want := outcome{Machines: 10, Done: 10, BIOS: 5, UEFI: 5, StepCounts: allSteps(10)}
	if diff := cmp.Diff(want, outcomeOf(res)); diff != "" {
		t.Fatalf("outcome (-want +got):\n%s\nfailures: %+v", diff, res.Failures)
	}
	var wantBytes int64
	for _, m := range res.MachineList {
		fs := int64(len(site.files["ipxe.efi"]))
		if m.Kind == "bios" {
			fs = int64(len(site.files["undionly.kpxe"]))
		}
		wantBytes += fs + int64(len(site.kernel)+len(site.initrd))
		if m.TotalS <= 0 || m.Kernel != site.base()+"/k/vmlinuz" || len(m.Initrds) != 1 || m.Initrds[0] != site.base()+"/k/initrd" {
			t.Errorf("machine %d: %+v", m.Index, m)
		}
	}
	if res.Bytes != wantBytes {
		t.Errorf("bytes %d, want %d", res.Bytes, wantBytes)
	}
	if res.CompletionS <= 0 || res.PerMachine.P50 <= 0 || res.PerMachine.P99 < res.PerMachine.P50 || res.PerMachine.Max < res.PerMachine.P99 {
		t.Errorf("implausible times: completion %v, %+v", res.CompletionS, res.PerMachine)
	}
	// Each machine sent one firmware and one iPXE DISCOVER, with its own
	// UUID in option 97 and the iPXE user class in the second only.
	site.mu.Lock()
	defer site.mu.Unlock()
	uuids := map[string]bool{}
	for mac, seen := range site.discovers {
		if len(seen) != 2 || seen[0].UserClass != "" || seen[1].UserClass != "iPXE" || string(seen[0].UUID) != string(seen[1].UUID) || len(seen[0].UUID) != 17 {
			t.Errorf("%s: DISCOVERs %+v", mac, seen)
			continue
		}
		uuids[string(seen[0].UUID)] = true
		if (seen[0].Arch == 0) != (seen[0].Class == undiBIOS) || (seen[0].Arch == 7) != (seen[0].Class == undiEFI) {
			t.Errorf("%s: arch %d with class %q", mac, seen[0].Arch, seen[0].Class)
		}
	}
	if len(site.discovers) != 10 || len(uuids) != 10 {
		t.Errorf("%d MACs and %d distinct UUIDs, want 10 each", len(site.discovers), len(uuids))
	}
	// The first stage came from the five source addresses, 2 machines
	// × (probe + transfer) each.
	if diff := cmp.Diff(map[string]int{"127.0.0.10": 4, "127.0.0.11": 4, "127.0.0.12": 4, "127.0.0.13": 4, "127.0.0.14": 4}, site.tftpSrcs); diff != "" {
		t.Errorf("TFTP requests by source (-want +got):\n%s", diff)
	}
	// /ipxe got iPXE's variables, filled in per machine.
	byMAC := map[string]MachineResult{}
	for _, m := range res.MachineList {
		byMAC[m.MAC] = m
	}
	for _, raw := range site.ipxeQuery {
		q, _ := url.ParseQuery(raw)
		m, ok := byMAC[q.Get("mac")]
		wantArch, wantPlat := "x86_64", "efi"
		if m.Kind == "bios" {
			wantArch, wantPlat = "i386", "pcbios"
		}
		if !ok || q.Get("uuid") != m.UUID || q.Get("buildarch") != wantArch || q.Get("platform") != wantPlat ||
			q.Get("serial") != "STORM-0000"+strconv.Itoa(m.Index) {
			t.Errorf("/ipxe?%s for machine %+v", raw, m)
		}
	}
}

func TestStormUEFIHTTPBoot(t *testing.T) {
	site := startFakeSite(t, faults{})
	o := site.options(4)
	o.BIOS, o.UEFIHTTP = 0, true
	res := storm(t, o)
	want := outcome{Machines: 4, Done: 4, UEFIHTTP: 4, StepCounts: allSteps(4)}
	if diff := cmp.Diff(want, outcomeOf(res)); diff != "" {
		t.Fatalf("outcome (-want +got):\n%s\nfailures: %+v", diff, res.Failures)
	}
	site.mu.Lock()
	defer site.mu.Unlock()
	if len(site.tftpSrcs) != 0 {
		t.Errorf("HTTP boot used TFTP: %v", site.tftpSrcs)
	}
	for mac, seen := range site.discovers {
		if seen[0].Arch != archHTTPx64 || seen[0].Class != undiHTTPBoot || seen[1].Arch != archEFIx64 {
			t.Errorf("%s: %+v", mac, seen)
		}
	}
}

// Each fault makes every machine fail at one step, for one reason.
func TestStormRecordsFailureStepAndReason(t *testing.T) {
	tests := []struct {
		name   string
		faults faults
		opts   func(*options)
		step   string
		reason string
		inErr  string
	}{
		{name: "TFTP server drops ACKs", faults: faults{DropACKsAfter: 2}, step: stepFirstStage, reason: "tftp-timeout", inErr: "no answer to ACK 2 after 6 sends"},
		{name: "tsize says more than is sent", faults: faults{WrongTSize: true}, step: stepFirstStage, reason: "size-mismatch"},
		{name: "no offer to iPXE", faults: faults{NoIPXEOffer: true}, step: stepIPXEDHCP, reason: "no-offer", inErr: "after 4 DISCOVERs"},
		{name: "script without kernel line", faults: faults{NoKernelLine: true}, step: stepScript, reason: "chain-loop", inErr: "is not registered"},
		{name: "boot server does not answer", faults: faults{Dnsmasq: true, NoACK: true}, step: stepPXEDHCP, reason: "no-ack", inErr: "after 4 requests to 127.0.0.1:"},
		{name: "iPXE's ProxyDHCP answers lack a next server", faults: faults{IPXEProxy: true, IPXEAckNoSiaddr: true}, step: stepIPXEDHCP, reason: "no-ack",
			inErr: "after 4 ProxyDHCPREQUESTs to 127.0.0.1:"},
		{name: "initrd shorter than Content-Length", faults: faults{ShortInitrd: true}, step: stepInitrd, reason: "short-body"},
		{name: "initrd digest", opts: func(o *options) { o.InitrdSHA256 = strings.Repeat("0", 64) }, step: stepInitrd, reason: "sha256-mismatch"},
		{name: "machine deadline while iPXE waits for an offer", faults: faults{NoIPXEOffer: true},
			opts: func(o *options) { o.MachineTimeout = 100 * time.Millisecond }, step: stepIPXEDHCP, reason: "machine-timeout"},
		{name: "run deadline while iPXE waits for an offer", faults: faults{NoIPXEOffer: true},
			opts: func(o *options) { o.Timeout, o.Window = 300*time.Millisecond, 0 }, step: stepIPXEDHCP, reason: "run-timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			site := startFakeSite(t, tc.faults)
			o := site.options(4)
			if tc.opts != nil {
				tc.opts(&o)
			}
			res := storm(t, o)
			if res.Done != 0 || len(res.Failures) != 1 {
				t.Fatalf("done %d, failures %+v; want every machine failed one way", res.Done, res.Failures)
			}
			f := res.Failures[0]
			if f.Step != tc.step || f.Reason != tc.reason || f.Count != 4 || !strings.Contains(f.Example, tc.inErr) {
				t.Errorf("failure %+v, want 4 at %s for %s with %q", f, tc.step, tc.reason, tc.inErr)
			}
			for _, m := range res.MachineList {
				if _, ok := m.Steps[tc.step]; !ok || m.FailedStep != tc.step {
					t.Errorf("machine %d: failed at %q, steps %v", m.Index, m.FailedStep, m.Steps)
				}
				for _, later := range stepOrder[indexOf(tc.step)+1:] {
					if _, ok := m.Steps[later]; ok {
						t.Errorf("machine %d went on to %s after failing at %s", m.Index, later, tc.step)
					}
				}
			}
		})
	}
}

func indexOf(step string) int {
	for i, s := range stepOrder {
		if s == step {
			return i
		}
	}
	return -1
}

// Lost packets cost retransmits, not the boot: the DHCP answer to the
// second DISCOVER, TFTP past one lost ACK.
func TestStormRetransmitsRecover(t *testing.T) {
	site := startFakeSite(t, faults{DropDiscovers: 1, DropFirstACK: true})
	res := storm(t, site.options(4))
	want := outcome{Machines: 4, Done: 4, BIOS: 2, UEFI: 2, StepCounts: allSteps(4)}
	if diff := cmp.Diff(want, outcomeOf(res)); diff != "" {
		t.Fatalf("outcome (-want +got):\n%s\nfailures: %+v", diff, res.Failures)
	}
	for _, m := range res.MachineList {
		// Only the firmware DISCOVER of each MAC was dropped.
		if m.DHCPRetransmits != 1 || m.TFTPRetransmits < 1 {
			t.Errorf("machine %d: %d DHCP and %d TFTP retransmits, want 1 and at least 1", m.Index, m.DHCPRetransmits, m.TFTPRetransmits)
		}
	}
	if res.DHCP.Retransmits != 4 || res.DHCP.Sent != 12 {
		t.Errorf("dhcp %+v, want 12 sent with 4 retransmits", res.DHCP)
	}
}

// Offers as dnsmasq makes them, without a boot file: the firmware asks
// the "4011" port as edk2 does (BIOS for the menu's item with sub-option
// 71, UEFI with nothing more), iPXE sends its ProxyDHCPREQUEST; every
// machine boots, each request named its own address, from that address.
func TestStormAsksPort4011(t *testing.T) {
	for _, tc := range []struct {
		name, srcIPs, pxeListen string
	}{
		{name: "own addresses, firmware from its 4011 socket", srcIPs: "127.0.0.10-127.0.0.14", pxeListen: "0.0.0.0:0"},
		{name: "the namespace's address, firmware from the DHCP socket", srcIPs: "", pxeListen: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			site := startFakeSite(t, faults{Dnsmasq: true, IPXEProxy: true})
			o := site.options(10)
			o.SrcIPs, o.PXEListen = tc.srcIPs, tc.pxeListen
			// Unscaled timeouts: this test counts every datagram and wants
			// no retransmit, and iPXE's first request timeout scaled by
			// 0.02 is 5 ms, less than a reply can take under -race on a
			// loaded machine (a full test run failed it here once, beside
			// other tests). Nothing here waits for a timeout.
			o.TimeScale = 1
			res := storm(t, o)
			want := outcome{Machines: 10, Done: 10, BIOS: 5, UEFI: 5, StepCounts: allSteps(10)}
			if diff := cmp.Diff(want, outcomeOf(res)); diff != "" {
				t.Fatalf("outcome (-want +got):\n%s\nfailures: %+v", diff, res.Failures)
			}
			pxeAddr := "127.0.0.1:" + strconv.Itoa(site.pxePort())
			for _, m := range res.MachineList {
				wantFile := map[string]string{"bios": "undionly.kpxe", "uefi": "ipxe.efi"}[m.Kind]
				if m.BootFile != wantFile || m.BootServer != pxeAddr || m.IPXEServer != pxeAddr || m.ProxyRequests != 2 ||
					m.DHCPRetransmits != 0 || m.ScriptURL != site.base()+"/boot.ipxe" {
					t.Errorf("machine %d: %+v", m.Index, m)
				}
			}
			if res.DHCP.Requests != 20 || res.DHCP.Sent != 40 {
				t.Errorf("dhcp %+v, want 40 sent, 20 of them requests", res.DHCP)
			}
			site.mu.Lock()
			defer site.mu.Unlock()
			for _, m := range res.MachineList {
				reqs, discs := site.requests[m.MAC], site.discovers[m.MAC]
				if len(reqs) != 2 || len(discs) != 2 {
					t.Errorf("%s: %d requests and %d DISCOVERs, want 2 each", m.MAC, len(reqs), len(discs))
					continue
				}
				fw, ipxe := reqs[0], reqs[1]
				own := m.Src
				if own == "" {
					own = "127.0.0.1"
				}
				// The firmware's request: its DISCOVER's identity and xid,
				// unicast (no broadcast flag), no option 54; BIOS names
				// the menu's item.
				wantVendor := []byte(nil)
				if m.Kind == "bios" {
					wantVendor = []byte{71, 4, 0x80, 0, 0, 0, 255}
				}
				if fw.discoverSeen.Class != discs[0].Class || fw.UserClass != "" || fw.Arch != discs[0].Arch || string(fw.UUID) != string(discs[0].UUID) ||
					fw.XID != discs[0].XID || fw.Ciaddr != own || fw.From != own || fw.Broadcast || fw.ServerID != "" || !bytes.Equal(fw.Vendor, wantVendor) {
					t.Errorf("%s: firmware request %+v after DISCOVER %+v", m.MAC, fw, discs[0])
				}
				// iPXE's: its DISCOVER's identity and xid, option 54, the
				// broadcast flag, from port 68 (the DHCP socket).
				if ipxe.Class != discs[1].Class || ipxe.UserClass != "iPXE" || ipxe.XID != discs[1].XID || ipxe.Ciaddr != own ||
					ipxe.From != own || !ipxe.Broadcast || ipxe.ServerID != "127.0.0.1" || ipxe.Vendor != nil {
					t.Errorf("%s: iPXE request %+v after DISCOVER %+v", m.MAC, ipxe, discs[1])
				}
				if (fw.FromPort == ipxe.FromPort) != (tc.pxeListen == "") {
					t.Errorf("%s: firmware request from port %d, iPXE's from %d, with -pxe-listen %q", m.MAC, fw.FromPort, ipxe.FromPort, tc.pxeListen)
				}
			}
		})
	}
}

// An iPXE offer with a PXE menu: BIOS iPXE asks the menu's boot server
// for its item, as its menu boot does, and takes only an ACK that echoes
// the item; EFI iPXE, built without PXE_MENU, cannot boot it.
func TestStormIPXEMenuBoot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		faults  faults
		biosErr string // empty: BIOS machines boot
	}{
		{name: "ACK echoes the item", faults: faults{IPXEMenu: true}},
		{name: "ACK without the item", faults: faults{IPXEMenu: true, NoItemEcho: true}, biosErr: "replies that were not ACKs for type 0x8000, which iPXE ignores"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			site := startFakeSite(t, tc.faults)
			o := site.options(4)
			o.SrcIPs = "127.0.0.20"
			res := storm(t, o)
			pxeAddr := "127.0.0.1:" + strconv.Itoa(site.pxePort())
			for _, m := range res.MachineList {
				switch {
				case m.Kind == "uefi":
					if m.FailedStep != stepIPXEDHCP || m.Reason != "bad-offer" || !strings.Contains(m.Error, "EFI iPXE cannot boot") || m.IPXEServer != "" {
						t.Errorf("UEFI machine %d: %+v", m.Index, m)
					}
				case tc.biosErr == "":
					if !m.Done || m.IPXEServer != pxeAddr || m.ProxyRequests != 1 || m.ScriptURL != site.base()+"/boot.ipxe" {
						t.Errorf("BIOS machine %d: %+v", m.Index, m)
					}
				default:
					if m.FailedStep != stepIPXEDHCP || m.Reason != "no-ack" || !strings.Contains(m.Error, tc.biosErr) || m.ProxyRequests != 3 {
						t.Errorf("BIOS machine %d: %+v", m.Index, m)
					}
				}
			}
			site.mu.Lock()
			defer site.mu.Unlock()
			for _, m := range res.MachineList {
				reqs := site.requests[m.MAC]
				if m.Kind == "bios" && (len(reqs) == 0 || reqs[0].UserClass != "iPXE" || !bytes.Equal(reqs[0].Vendor, []byte{71, 4, 0x80, 0, 0, 0, 255}) ||
					!reqs[0].Broadcast || reqs[0].ServerID != "" || reqs[0].Ciaddr != "127.0.0.20" || reqs[0].From != "127.0.0.20") {
					t.Errorf("BIOS machine %d: requests %+v", m.Index, reqs)
				}
			}
		})
	}
}

// A request lost costs a retransmit after -pxe-req-timeouts' first.
func TestStormRequestRetransmitsRecover(t *testing.T) {
	site := startFakeSite(t, faults{Dnsmasq: true, IPXEProxy: true, DropRequests: 1})
	res := storm(t, site.options(4))
	if res.Done != 4 {
		t.Fatalf("done %d of 4, failures %+v", res.Done, res.Failures)
	}
	for _, m := range res.MachineList {
		// Only the firmware's first request of each MAC was dropped.
		if m.DHCPRetransmits != 1 || m.ProxyRequests != 3 {
			t.Errorf("machine %d: %d DHCP retransmits and %d requests, want 1 and 3", m.Index, m.DHCPRetransmits, m.ProxyRequests)
		}
	}
	if res.DHCP.Retransmits != 4 || res.DHCP.Requests != 12 || res.DHCP.Sent != 20 {
		t.Errorf("dhcp %+v, want 20 sent: 12 requests, 4 retransmits", res.DHCP)
	}
}

// firmwareAsk decides as edk2 does whether the offer's file is booted or
// port 4011 asked, and what for.
func TestFirmwareAsk(t *testing.T) {
	srv, other := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.9")
	menu := []pxe.MenuItem{{Type: 0x8001, Desc: "first"}, {Type: 0x8000, Desc: "second"}}
	tests := []struct {
		name     string
		offer    pxe.Reply
		httpBoot bool
		want     *bootAsk
		wantErr  string
	}{
		{name: "siteboot: discovery control 8 and a file", offer: pxe.Reply{ServerID: srv, BootFile: "ipxe.efi", PXE: pxe.PXEOptions{Discovery: true, Control: pxe.CtlUseFile}}},
		{name: "no discovery options: ask the next server", offer: pxe.Reply{Siaddr: other, ServerID: srv}, want: &bootAsk{server: other}},
		{name: "no discovery options, a file: still ask (edk2)", offer: pxe.Reply{ServerID: srv, BootFile: "ipxe.efi"}, want: &bootAsk{server: srv}},
		{name: "no discovery options, no server", offer: pxe.Reply{}, wantErr: "names no server to ask"},
		{name: "menu: its first item at the listed server", offer: pxe.Reply{ServerID: srv, PXE: pxe.PXEOptions{Discovery: true, Control: 3, Menu: menu,
			Servers: []pxe.BootServer{{Type: 0x8000, Addrs: []netip.Addr{srv}}, {Type: 0x8001, Addrs: []netip.Addr{other}}}}},
			want: &bootAsk{server: other, item: &pxe.BootItem{Type: 0x8001}}},
		{name: "menu and a file, control 0: the menu", offer: pxe.Reply{ServerID: srv, BootFile: "x", PXE: pxe.PXEOptions{Discovery: true, Menu: menu}},
			want: &bootAsk{server: srv, item: &pxe.BootItem{Type: 0x8001}}},
		{name: "menu item without a listed server: the proxy", offer: pxe.Reply{ServerID: srv, PXE: pxe.PXEOptions{Discovery: true, Menu: menu}},
			want: &bootAsk{server: srv, item: &pxe.BootItem{Type: 0x8001}}},
		{name: "menu item without a listed server, list only", offer: pxe.Reply{ServerID: srv, PXE: pxe.PXEOptions{Discovery: true, Control: pxe.CtlServerList, Menu: menu}},
			wantErr: "allows only the listed ones"},
		{name: "local boot first", offer: pxe.Reply{ServerID: srv, PXE: pxe.PXEOptions{Discovery: true, Menu: []pxe.MenuItem{{Type: 0}}}}, wantErr: "local boot"},
		{name: "discovery options, a file, no menu", offer: pxe.Reply{BootFile: "x", PXE: pxe.PXEOptions{Discovery: true}}},
		{name: "discovery options, no file, no menu", offer: pxe.Reply{ServerID: srv, PXE: pxe.PXEOptions{Discovery: true}}, wantErr: "no boot file and has no boot menu"},
		{name: "HTTP boot", offer: pxe.Reply{BootFile: "http://x/ipxe.efi"}, httpBoot: true},
		{name: "HTTP boot without a file", offer: pxe.Reply{}, httpBoot: true, wantErr: "HTTP boot offer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := firmwareAsk(tc.offer, tc.httpBoot)
			if tc.wantErr != "" {
				if !errors.Is(err, errBadOffer) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("firmwareAsk() error = %v, want bad offer with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(bootAsk{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("firmwareAsk() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// The 4011 flags: checked, and scaled by -timescale like the others.
func TestRequestFlags(t *testing.T) {
	o, err := parseFlags([]string{"-timescale", "0.5", "-pxe-listen", ""}, new(strings.Builder))
	if err != nil {
		t.Fatal(err)
	}
	spec := o.bootSpec()
	want := bootSpec{PXEReqTimeouts: []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second},
		IPXEReqTimeouts: []time.Duration{125 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second}, PXEPort: 4011}
	got := bootSpec{PXEReqTimeouts: spec.PXEReqTimeouts, IPXEReqTimeouts: spec.IPXEReqTimeouts, PXEPort: spec.PXEPort}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(tftpSpec{}, httpSpec{})); diff != "" {
		t.Errorf("boot spec (-want +got):\n%s", diff)
	}
	for _, args := range [][]string{
		{"-ipxe-bs-timeouts", ""},
		{"-pxe-port", "0"}, {"-pxe-port", "65536"}, {"-pxe-listen", "4011"},
		{"-pxe-req-timeouts", "1s,x"}, {"-ipxe-req-timeouts", "0s"}, {"-pxe-req-timeouts", "3m"},
	} {
		if _, err := parseFlags(args, new(strings.Builder)); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

// TestStormUEFIWindowsize: UEFI machines ask for windowsize 4 in their
// probe and their download (without tsize in the download, as edk2), BIOS
// machines for none; granted a window of 2, a UEFI machine acknowledges
// every second block only, and a lost block costs one early ACK and the
// window again, not a timeout on either side.
func TestStormUEFIWindowsize(t *testing.T) {
	for _, lose := range []int{0, 1} {
		t.Run(fmt.Sprintf("lose block %d", lose), func(t *testing.T) {
			site := startFakeSite(t, faults{Window: 2, LoseBlock: lose})
			o := site.options(4)
			o.TimeScale = 1 // it wants no retransmit: unscaled timeouts, as TestStormAsksPort4011
			res := storm(t, o)
			want := outcome{Machines: 4, Done: 4, BIOS: 2, UEFI: 2, StepCounts: allSteps(4)}
			if diff := cmp.Diff(want, outcomeOf(res)); diff != "" {
				t.Fatalf("outcome (-want +got):\n%s\nfailures: %+v", diff, res.Failures)
			}
			site.mu.Lock()
			defer site.mu.Unlock()
			wantOpts := map[string][]string{
				"ipxe.efi":      {"tsize=0 blksize=1468 windowsize=4", "blksize=1468 windowsize=4"},
				"undionly.kpxe": {"tsize=0 blksize=1468", "tsize=0 blksize=1468"},
			}
			for file, reqs := range site.rrqOpts {
				for _, r := range reqs {
					if !slices.Contains(wantOpts[file], r) {
						t.Errorf("%s: request with options %q, want one of %q", file, r, wantOpts[file])
					}
				}
			}
			// ipxe.efi here is 3 full blocks and an empty 4th. The probe
			// ends with an ERROR; the download acknowledges its OACK (ACK
			// 0), then blocks 2 and 4; with block 1 lost, block 2 comes
			// first and is answered with ACK 0 again, and the window
			// starts over.
			perMachine := 3
			if lose > 0 {
				perMachine++
			}
			if site.windowACKs != 2*perMachine {
				t.Errorf("windowed transfers got %d ACKs, want %d (2 UEFI machines × %d)", site.windowACKs, 2*perMachine, perMachine)
			}
			if res.TFTPRetransmits != 0 {
				t.Errorf("%d TFTP retransmits, want none (a lost block is answered at once)", res.TFTPRetransmits)
			}
		})
	}
}

// TestStormBulkInline: with -bulk-inline the kernel and initrd come by
// this process's own connections, with the same outcome as by the
// worker.
func TestStormBulkInline(t *testing.T) {
	site := startFakeSite(t, faults{})
	for _, inline := range []bool{true, false} {
		o := site.options(4)
		o.BulkInline = inline
		res := storm(t, o)
		want := outcome{Machines: 4, Done: 4, BIOS: 2, UEFI: 2, StepCounts: allSteps(4)}
		if diff := cmp.Diff(want, outcomeOf(res)); diff != "" {
			t.Errorf("inline %v: outcome (-want +got):\n%s\nfailures: %+v", inline, diff, res.Failures)
		}
		for _, m := range res.MachineList {
			if m.Steps[stepKernel] <= 0 || m.Steps[stepInitrd] <= 0 {
				t.Errorf("inline %v: machine %d steps %v", inline, m.Index, m.Steps)
			}
		}
	}
}
