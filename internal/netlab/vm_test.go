package netlab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// bootTimeout bounds each VM test's boot, well above the ~16-22 s a boot
// takes under TCG on these machines (docs/testing.md).
const bootTimeout = 3 * time.Minute

// TestBIOSVMBootsIPXEScript: SeaBIOS runs the virtio-net ROM (iPXE), whose
// DISCOVER reaches dnsmasq with PXEClient and user class iPXE; dnsmasq, as a
// full PXE server, hands it a script URL, and the script's fetch arrives at
// a Go HTTP server on another host.
func TestBIOSVMBootsIPXEScript(t *testing.T) {
	res := bootVM(t, BIOS)
	want := probe{MAC: res.vm.MAC.String(), Arch: "i386", Platform: "pcbios"}
	if diff := cmp.Diff(want, res.probe); diff != "" {
		t.Errorf("script fetch mismatch (-want +got):\n%s", diff)
	}
	for _, s := range []string{"vendor class: PXEClient:Arch:00000", "user class: iPXE"} {
		if !res.discover.has(s) {
			t.Errorf("dnsmasq DHCPDISCOVER from %s lacks %q:\n%s", res.vm.MAC, s, res.discover)
		}
	}
	ppm := filepath.Join(res.lab.Dir(), "screen.ppm")
	if err := res.vm.Screendump(res.lab.Context(), ppm); err != nil {
		t.Fatalf("screendump: %v", err)
	}
	if b, err := waitNonEmpty(res.lab.Context(), ppm); err != nil || !strings.HasPrefix(string(b), "P6") {
		t.Errorf("screendump %s: want a PPM (P6), got %.2q, err %v", ppm, b, err)
	}
}

// TestUEFIVMBootsIPXEScript: OVMF's edk2 PXE client (arch 7, no user class)
// fetches ipxe.efi over dnsmasq's TFTP, then iPXE (x86_64/efi) fetches the
// script.
func TestUEFIVMBootsIPXEScript(t *testing.T) {
	res := bootVM(t, UEFI)
	want := probe{MAC: res.vm.MAC.String(), Arch: "x86_64", Platform: "efi"}
	if diff := cmp.Diff(want, res.probe); diff != "" {
		t.Errorf("script fetch mismatch (-want +got):\n%s", diff)
	}
	if !res.first.has("vendor class: PXEClient:Arch:00007") || res.first.has("user class:") {
		t.Errorf("first DHCPDISCOVER from %s: want edk2's (arch 7, no user class):\n%s", res.vm.MAC, res.first)
	}
	if !res.discover.has("user class: iPXE") {
		t.Errorf("no DHCPDISCOVER from iPXE (user class iPXE) for %s:\n%s", res.vm.MAC, res.discover)
	}
	ctx, cancel := context.WithTimeout(res.lab.Context(), 5*time.Second)
	defer cancel()
	if _, err := res.dnsmasq.WaitLog(ctx, "sent", "ipxe.efi"); err != nil {
		t.Errorf("dnsmasq never sent ipxe.efi over TFTP: %v", err)
	}
}

type bootResult struct {
	lab      *Lab
	vm       *VM
	dnsmasq  *Dnsmasq
	probe    probe
	first    transaction // the VM's first DHCPDISCOVER
	discover transaction // the VM's DHCPDISCOVER that carried user class iPXE, or the last one
}

// bootVM builds a lab (dnsmasq as a full PXE server on one host, a script
// server on another), boots a VM and waits for its script's fetch.
func bootVM(t *testing.T, fw Firmware) bootResult {
	Require(t, NeedsDnsmasq(), NeedsVM(fw))
	l := New(t, Config{})
	ctx, cancel := context.WithTimeout(l.Context(), bootTimeout)
	defer cancel()
	dhcp, web := l.AddHost("dhcp"), l.AddHost("web")
	probes := serveScripts(t, web)
	d := dhcp.StartDnsmasq(DnsmasqConfig{Extra: pxeServerFlags(web.Addr().String() + ":8080")})

	start := time.Now()
	vm := l.StartVM(VMConfig{Firmware: fw})
	var p probe
	select {
	case p = <-probes:
	case <-vm.Done():
		t.Fatalf("qemu exited: %v\n%s", vm.Err(), vm.Output())
	case <-ctx.Done():
		dumpScreen(t, vm)
		t.Fatalf("%s VM %s fetched no script within %v", fw, vm.MAC, bootTimeout)
	}
	t.Logf("%s VM %s: power-on to script fetch %v", fw, vm.MAC, time.Since(start).Round(100*time.Millisecond))
	txs := dhcpTransactions(t, d, "DHCPDISCOVER", vm.MAC.String())
	res := bootResult{lab: l, vm: vm, dnsmasq: d, probe: p, first: txs[0], discover: txs[len(txs)-1]}
	for _, tx := range txs {
		if tx.has("user class: iPXE") {
			res.discover = tx
		}
	}
	return res
}

// pxeServerFlags make dnsmasq a full PXE server: iPXE gets the script URL,
// edk2 (arch 7) gets ipxe.efi and a BIOS PXE ROM undionly.kpxe over TFTP.
func pxeServerFlags(script string) []string {
	return []string{
		"--enable-tftp", "--tftp-root=/usr/lib/ipxe",
		"--dhcp-userclass=set:ipxe,iPXE",
		"--dhcp-match=set:efi64,option:client-arch,7",
		"--dhcp-boot=tag:ipxe,http://" + script + "/boot.ipxe",
		"--dhcp-boot=tag:!ipxe,tag:efi64,ipxe.efi",
		"--dhcp-boot=tag:!ipxe,tag:!efi64,undionly.kpxe",
	}
}

// probe is what the script reports back about the iPXE that ran it.
type probe struct{ MAC, Arch, Platform string }

// serveScripts serves /boot.ipxe and /probe on host:8080 until the test ends
// and reports each probe.
func serveScripts(t *testing.T, h *Host) <-chan probe {
	t.Helper()
	ln, err := h.Listen(h.Lab().Context(), "tcp4", h.Addr().String()+":8080")
	if err != nil {
		t.Fatal(err)
	}
	probes := make(chan probe, 16)
	base := "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/boot.ipxe", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "#!ipxe\nchain %s/probe?mac=${net0/mac}&arch=${buildarch}&platform=${platform}\n", base)
	})
	mux.HandleFunc("/probe", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		select {
		case probes <- probe{MAC: q.Get("mac"), Arch: q.Get("arch"), Platform: q.Get("platform")}:
		default:
		}
		fmt.Fprint(w, "#!ipxe\necho netlab probe done\nsleep 300\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("script server: %v", err)
		}
	})
	return probes
}

// transaction is the dnsmasq log lines of one DHCP exchange (they share the
// serial number dnsmasq prints after "dnsmasq-dhcp[pid]:").
type transaction []string

func (tx transaction) has(s string) bool {
	_, ok := findLine(strings.Join(tx, "\n"), s)
	return ok
}

func (tx transaction) String() string { return strings.Join(tx, "\n") }

// dhcpTransactions groups dnsmasq's log by exchange and returns those
// having a line with every one of substrs, oldest first.
func dhcpTransactions(t *testing.T, d *Dnsmasq, substrs ...string) []transaction {
	t.Helper()
	b, err := os.ReadFile(d.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	groups := map[string]transaction{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[3], "dnsmasq-dhcp[") {
			continue
		}
		if _, seen := groups[f[4]]; !seen {
			order = append(order, f[4])
		}
		groups[f[4]] = append(groups[f[4]], line)
	}
	var out []transaction
	for _, id := range order {
		if _, ok := lineWithAll(groups[id].String(), substrs); ok {
			out = append(out, groups[id])
		}
	}
	if len(out) == 0 {
		t.Fatalf("dnsmasq log has no exchange with %q:\n%s", substrs, b)
	}
	return out
}

func dumpScreen(t *testing.T, vm *VM) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	path := filepath.Join(os.TempDir(), fmt.Sprintf("netlab-%s-%d.ppm", vm.MAC.String()[9:11], time.Now().Unix()))
	if err := vm.Screendump(ctx, path); err != nil {
		t.Logf("screendump: %v", err)
		return
	}
	t.Logf("VM screen saved to %s (convert it to PNG to look)", path)
}

func waitNonEmpty(ctx context.Context, path string) ([]byte, error) {
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
