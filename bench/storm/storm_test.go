package main

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when one of them leaks a goroutine:
// every machine's sockets and connections must be gone at the end.
func TestMain(m *testing.M) {
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
	res, err := runStorm(context.Background(), o, conn)
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
