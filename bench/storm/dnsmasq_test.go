package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/internal/netlab"
)

// dnsmasqStormConf is the dnsmasq 2.90 configuration storm boots from in
// proxy mode, one option a line as in a conf file (bench/README.md,
// storm section, has the same lines, for the benchmark scripts): proxy
// DHCP on the server's subnet, its TFTP serving Debian's iPXE builds, the
// iPXE script by HTTP, and offers only to the machines listed.
//
//	port=0
//	dhcp-range=<server subnet address>,proxy
//	enable-tftp
//	tftp-root=/usr/lib/ipxe
//	dhcp-userclass=set:ipxe,iPXE
//	pxe-service=tag:!ipxe,x86PC,"boot",undionly.kpxe
//	pxe-service=tag:!ipxe,X86-64_EFI,"boot",ipxe.efi
//	dhcp-boot=tag:ipxe,http://<server>:<port>/boot.ipxe,,<server>
//	dhcp-ignore=tag:!known
//	dhcp-host=<mac>,set:known           (one line per machine)
//
// What each machine then does (captured with tcpdump):
//   - BIOS firmware gets an offer without a file, with a one-item menu
//     (type 0x8000) and its boot server (option 43: 6.1.3, 10, 8, 9), and
//     asks that server's port 4011 for the item (sub-option 71): the ACK
//     names undionly.kpxe and the next server.
//   - UEFI firmware gets next server and nothing else (no option 43: one
//     service per architecture, dnsmasq's "UEFI workaround") and asks its
//     port 4011 again, without option 43, as edk2 does: the ACK names
//     ipxe.efi.
//   - iPXE gets the script's URL and, because of dhcp-boot's server
//     address, a next server, so it takes the offer as is. Without that
//     address (dhcp-boot=tag:ipxe,<url>) the BIOS offer has no next server,
//     iPXE sends a ProxyDHCPREQUEST and ignores dnsmasq's answer, which has
//     none either: BIOS machines fail (iPXE 0a34c2aab, ipxe/ipxe#954).
//     UEFI ones would not notice, dnsmasq sets the next server for them.
//     pxe-service lines with the URL for tag ipxe instead of dhcp-boot
//     boot too, with one more exchange: a menu BIOS iPXE asks port 4011
//     for, a ProxyDHCPREQUEST from EFI iPXE.
func dnsmasqStormConf(subnet, server string, httpPort int, known []string) []string {
	url := fmt.Sprintf("http://%s:%d/boot.ipxe", server, httpPort)
	lines := []string{
		"port=0",
		"dhcp-range=" + subnet + ",proxy",
		"enable-tftp",
		"tftp-root=/usr/lib/ipxe",
		"dhcp-userclass=set:ipxe,iPXE",
		`pxe-service=tag:!ipxe,x86PC,"boot",undionly.kpxe`,
		`pxe-service=tag:!ipxe,X86-64_EFI,"boot",ipxe.efi`,
		"dhcp-boot=tag:ipxe," + url + ",," + server,
		"dhcp-ignore=tag:!known",
	}
	for _, mac := range known {
		lines = append(lines, "dhcp-host="+mac+",set:known")
	}
	return lines
}

// TestAgainstDnsmasq boots 20 machines (10 BIOS, 10 UEFI) from a real
// dnsmasq in proxy mode (dnsmasqStormConf) on a lab LAN: the firmware's
// requests to port 4011, the first stage from dnsmasq's TFTP, the iPXE
// script, kernel and initrd from a small HTTP server next to it, verified
// by SHA-256. Machines it does not know get no offer. A second dnsmasq,
// configured as one would first try (dhcp-boot without the server
// address), shows what iPXE does with its answers: BIOS machines fail at
// iPXE's DHCP for want of a usable ProxyDHCP answer, UEFI ones boot. A
// third gives iPXE the URL by pxe-service, as a menu for BIOS: that boots.
func TestAgainstDnsmasq(t *testing.T) {
	netlab.Require(t, netlab.NeedsDnsmasq(), netlab.Needs{Files: []string{"/usr/lib/ipxe/undionly.kpxe", "/usr/lib/ipxe/ipxe.efi"}})
	l := netlab.New(t, netlab.Config{CommandTimeout: 2 * time.Minute})
	srv, alt, menu, cli := l.AddHost("server"), l.AddHost("alt"), l.AddHost("menu"), l.AddHost("client")
	dir := t.TempDir()
	stormBin := buildBinary(t, dir, "github.com/siteboot/siteboot/bench/storm")
	ctx, cancel := context.WithTimeout(l.Context(), 2*time.Minute)
	defer cancel()

	// The HTTP server: /boot.ipxe with a kernel and an initrd line, and
	// the two files.
	const httpPort = 8080
	kernel, initrd := blob(2<<20, 7), blob(3<<20+77, 8)
	ksum, isum := sha256.Sum256(kernel), sha256.Sum256(initrd)
	khex, ihex := hex.EncodeToString(ksum[:]), hex.EncodeToString(isum[:])
	base := fmt.Sprintf("http://%s:%d", srv.Addr(), httpPort)
	script := fmt.Sprintf("#!ipxe\nkernel %s/vmlinuz console=ttyS0\ninitrd %s/initrd\nboot\n", base, base)
	ln, err := srv.Listen(ctx, "tcp4", fmt.Sprintf("%s:%d", srv.Addr(), httpPort))
	if err != nil {
		t.Fatal(err)
	}
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/boot.ipxe":
			writeSized(w, []byte(script))
		case "/vmlinuz":
			writeSized(w, kernel)
		case "/initrd":
			writeSized(w, initrd)
		default:
			http.NotFound(w, r)
		}
	})}
	go func() { _ = web.Serve(ln) }()
	t.Cleanup(func() { _ = web.Close() })

	// Machines 02:5c:… are the known ones of the first dnsmasq, 02:5f:…
	// those of the second, 02:60:… the third's.
	const n = 20
	common := []string{"-n", strconv.Itoa(n), "-mac-prefix", "02:5c", "-seed", "5"}
	alts := []string{"-n", "4", "-mac-prefix", "02:5f", "-seed", "6"}
	menus := []string{"-n", "4", "-mac-prefix", "02:60", "-seed", "7"}
	macs := func(args []string) []string {
		t.Helper()
		out, err := cli.Run(ctx, stormBin, append(args, "-print-machines")...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var m []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			m = append(m, strings.Split(line, "\t")[0])
		}
		return m
	}
	subnet := l.Subnet().Masked().Addr().String()
	startDnsmasq := func(h *netlab.Host, label string, lines []string) {
		t.Helper()
		// What the lab needs (its interface, logs, no DNS), then the
		// storm's lines, in one file as a site has them.
		logFile := filepath.Join(dir, label+".log")
		lines = append([]string{"interface=" + netlab.Iface, "bind-interfaces", "user=root", "log-dhcp",
			"log-facility=" + logFile, "dhcp-leasefile=" + filepath.Join(dir, label+".leases"),
			"pid-file=" + filepath.Join(dir, label+".pid")}, lines...)
		conf := filepath.Join(dir, label+".conf")
		if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p := h.Start(label, "dnsmasq", "--keep-in-foreground", "--conf-file="+conf)
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(logFile)
				t.Logf("%s log (last 8 KiB):\n%s", label, b[max(0, len(b)-8192):])
			}
		})
		if _, err := netlab.WaitFile(ctx, logFile, "started, version"); err != nil {
			t.Fatalf("%s did not start: %v\n%s", label, err, p.Output())
		}
	}
	startDnsmasq(srv, "dnsmasq", dnsmasqStormConf(subnet, srv.Addr().String(), httpPort, macs(common)))
	altConf := dnsmasqStormConf(subnet, srv.Addr().String(), httpPort, macs(alts))
	for i, line := range altConf {
		if strings.HasPrefix(line, "dhcp-boot=") {
			altConf[i] = "dhcp-boot=tag:ipxe," + base + "/boot.ipxe" // no server address
		}
	}
	startDnsmasq(alt, "dnsmasq-alt", altConf)
	var menuConf []string
	for _, line := range dnsmasqStormConf(subnet, srv.Addr().String(), httpPort, macs(menus)) {
		if !strings.HasPrefix(line, "dhcp-boot=") {
			menuConf = append(menuConf, line)
			continue
		}
		menuConf = append(menuConf, `pxe-service=tag:ipxe,x86PC,"boot",`+base+"/boot.ipxe", `pxe-service=tag:ipxe,X86-64_EFI,"boot",`+base+"/boot.ipxe")
	}
	startDnsmasq(menu, "dnsmasq-menu", menuConf)

	// Five addresses of the client's own, four machines each.
	for i := 200; i < 205; i++ {
		if out, err := cli.Run(ctx, "ip", "addr", "add", l.Addr(i).String()+"/24", "dev", netlab.Iface); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	stormRun := func(args ...string) Result {
		t.Helper()
		out, err := cli.Run(ctx, stormBin, append([]string{"-iface", netlab.Iface, "-json",
			"-src-ips", l.Addr(200).String() + "-" + l.Addr(204).String(), "-timeout", "100s"}, args...)...)
		var res Result
		if derr := json.NewDecoder(bytes.NewReader(out)).Decode(&res); derr != nil {
			t.Fatalf("storm %s: %v, output not JSON: %v\n%s", strings.Join(args, " "), err, derr, clip(string(out)))
		}
		if (err != nil) != (res.Failed > 0) {
			t.Errorf("storm exit %v with %d failed machines", err, res.Failed)
		}
		return res
	}

	t.Run("known machines boot", func(t *testing.T) {
		res := stormRun(append(common, "-window", "1s", "-timescale", "0.1", "-kernel-sha256", khex, "-initrd-sha256", ihex, "-machine-timeout", "60s")...)
		want := outcome{Machines: n, Done: n, BIOS: n / 2, UEFI: n / 2, StepCounts: allSteps(n)}
		if diff := cmp.Diff(want, outcomeOf(res)); diff != "" {
			t.Fatalf("outcome (-want +got):\n%s\nfailures: %+v", diff, res.Failures)
		}
		fs := map[string]int64{"bios": fileSize(t, "/usr/lib/ipxe/undionly.kpxe"), "uefi": fileSize(t, "/usr/lib/ipxe/ipxe.efi")}
		bootServer := srv.Addr().String() + ":4011"
		for _, m := range res.MachineList {
			// Every firmware asked port 4011 for its file; iPXE took the
			// offer as it was.
			wantFile := map[string]string{"bios": "undionly.kpxe", "uefi": "ipxe.efi"}[m.Kind]
			if m.BootFile != wantFile || m.BootServer != bootServer || m.ProxyRequests < 1 || m.IPXEServer != "" ||
				m.ScriptURL != base+"/boot.ipxe" || m.Kernel != base+"/vmlinuz" || len(m.Initrds) != 1 || m.Initrds[0] != base+"/initrd" ||
				m.Bytes != fs[m.Kind]+int64(len(kernel)+len(initrd)) {
				t.Errorf("machine %d: %+v", m.Index, m)
			}
		}
		if res.DHCP.Requests < n {
			t.Errorf("dhcp %+v: fewer than %d requests to port 4011", res.DHCP, n)
		}
		var table strings.Builder
		if err := writeTable(&table, res); err != nil {
			t.Fatal(err)
		}
		t.Logf("storm against dnsmasq:\n%s", table.String())
	})

	t.Run("machines it does not know get no offer", func(t *testing.T) {
		res := stormRun("-n", "3", "-mac-prefix", "02:5d", "-window", "0s", "-timescale", "0.05", "-machine-timeout", "20s")
		if res.Done != 0 || len(res.Failures) != 1 || res.Failures[0].Step != stepPXEDHCP ||
			res.Failures[0].Reason != "no-offer" || res.Failures[0].Count != 3 {
			t.Errorf("failures %+v, want 3 at %s for no-offer", res.Failures, stepPXEDHCP)
		}
	})

	t.Run("dhcp-boot without a server address fails BIOS iPXE", func(t *testing.T) {
		res := stormRun(append(alts, "-window", "0s", "-timescale", "0.1", "-machine-timeout", "30s")...)
		want := outcome{Machines: 4, Done: 2, Failed: 2, BIOS: 2, UEFI: 2, Failures: []string{stepIPXEDHCP + "/no-ack×2"},
			StepCounts: map[string]int{stepPXEDHCP: 4, stepFirstStage: 4, stepIPXEDHCP: 2, stepScript: 2, stepKernel: 2, stepInitrd: 2, stepKernelInitrd: 2}}
		if diff := cmp.Diff(want, outcomeOf(res)); diff != "" {
			t.Fatalf("outcome (-want +got):\n%s\nfailures: %+v", diff, res.Failures)
		}
		for _, m := range res.MachineList {
			if m.Kind == "bios" && (m.FailedStep != stepIPXEDHCP || m.IPXEServer != alt.Addr().String()+":4011" ||
				!strings.Contains(m.Error, "without PXE options, which iPXE ignores")) {
				t.Errorf("BIOS machine %d: %+v", m.Index, m)
			}
		}
	})

	t.Run("pxe-service with the URL for iPXE works too", func(t *testing.T) {
		// BIOS iPXE boots the one-item menu dnsmasq sends it by asking
		// port 4011 for the item; EFI iPXE gets next server only (no
		// menu, as firmware) and sends a ProxyDHCPREQUEST.
		res := stormRun(append(menus, "-window", "0s", "-timescale", "0.1", "-machine-timeout", "30s")...)
		want := outcome{Machines: 4, Done: 4, BIOS: 2, UEFI: 2, StepCounts: allSteps(4)}
		if diff := cmp.Diff(want, outcomeOf(res)); diff != "" {
			t.Fatalf("outcome (-want +got):\n%s\nfailures: %+v", diff, res.Failures)
		}
		for _, m := range res.MachineList {
			if m.IPXEServer != menu.Addr().String()+":4011" || m.ProxyRequests < 2 || m.ScriptURL != base+"/boot.ipxe" {
				t.Errorf("machine %d: %+v", m.Index, m)
			}
		}
	})
}
