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
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/internal/netlab"
)

// buildBinary builds a command of this module into dir.
func buildBinary(t *testing.T, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// TestAgainstSiteboot boots 20 machines (10 BIOS, 10 UEFI) from a real
// `siteboot serve` on a lab LAN: proxyDHCP on eth0, TFTP of Debian's
// undionly.kpxe and ipxe.efi, its /boot.ipxe and /ipxe, and a kernel and
// initrd from its image cache, verified by SHA-256. The entries pin each
// machine's UUID, so the boot also shows that option 97 and ${uuid} carry
// what siteboot expects. Machines it has no entry for must fail at the
// first DHCP step. storm runs as a process in a client namespace, from
// five addresses of its own. Two more machines UEFI-HTTP-boot.
func TestAgainstSiteboot(t *testing.T) {
	netlab.Require(t, netlab.Needs{Files: []string{"/usr/lib/ipxe/undionly.kpxe", "/usr/lib/ipxe/ipxe.efi"}})
	l := netlab.New(t, netlab.Config{CommandTimeout: 2 * time.Minute})
	srv, cli := l.AddHost("server"), l.AddHost("client")
	dir := t.TempDir()
	sbBin := buildBinary(t, dir, "github.com/siteboot/siteboot/cmd/siteboot")
	stormBin := buildBinary(t, dir, "github.com/siteboot/siteboot/bench/storm")

	// The origin the cache pulls the kernel and initrd from, on the server
	// namespace's loopback.
	kernel, initrd := blob(3<<20, 5), blob(5<<20+123, 6)
	ln, err := srv.Listen(l.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/vmlinuz":
			writeSized(w, kernel)
		case "/initrd":
			writeSized(w, initrd)
		default:
			http.NotFound(w, r)
		}
	})}
	go func() { _ = origin.Serve(ln) }()
	t.Cleanup(func() { _ = origin.Close() })
	ksum, isum := sha256.Sum256(kernel), sha256.Sum256(initrd)
	khex, ihex := hex.EncodeToString(ksum[:]), hex.EncodeToString(isum[:])

	addr := srv.Addr().String()
	data := filepath.Join(dir, "data")
	sock := filepath.Join(data, "siteboot.sock")
	cfg := strings.Join([]string{
		"site_id: storm", "node_id: storm-1", "data_dir: " + data,
		"http:", "  listen: " + addr + ":8080",
		"dhcp:", "  enabled: true", "  interfaces: [" + netlab.Iface + "]",
		"tftp:", "  listen: " + addr + ":69",
		"boot_files:", "  dir: /usr/lib/ipxe",
		"ramdisk:", "  kernel: sha256:" + khex, "  initrd: sha256:" + ihex, "  cmdline: console=ttyS0",
	}, "\n") + "\n"
	cfgPath := filepath.Join(dir, "siteboot.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	proc := srv.Start("siteboot", sbBin, "serve", "--config", cfgPath)
	ctx, cancel := context.WithTimeout(l.Context(), 2*time.Minute)
	defer cancel()
	if _, err := proc.WaitOutput(ctx, "siteboot ready"); err != nil {
		t.Fatalf("siteboot did not become ready: %v", err)
	}
	sb := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, sbBin, append([]string{"--socket", sock}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("siteboot %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	sb("image", "add", "--url", "http://"+ln.Addr().String()+"/vmlinuz", "--sha256", khex)
	sb("image", "add", "--url", "http://"+ln.Addr().String()+"/initrd", "--sha256", ihex)
	sb("image", "pull", "--wait")

	const n = 20
	common := []string{"-n", strconv.Itoa(n), "-mac-prefix", "02:5c", "-seed", "3"}
	list, err := cli.Run(ctx, stormBin, append(common, "-print-machines")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, list)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		f := strings.Split(line, "\t")
		arch := map[string]string{"bios": "bios", "uefi": "x86_64-efi"}[f[2]]
		sb("entry", "add", "--node-id", fmt.Sprintf("node-%02d", i), "--mac", f[0], "--uuid", f[1], "--arch", arch)
	}
	httpBoot := []string{"-n", "2", "-mac-prefix", "02:5e", "-bios", "0", "-uefi-http"}
	list, err = cli.Run(ctx, stormBin, append(httpBoot, "-print-machines")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, list)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		f := strings.Split(line, "\t")
		sb("entry", "add", "--node-id", fmt.Sprintf("http-%02d", i), "--mac", f[0], "--arch", "x86_64-efi-http")
	}
	// Five addresses of the client's own, four machines each: real
	// machines each have an address, and siteboot's TFTP bounds the
	// transfers of one address.
	for i := 200; i < 205; i++ {
		a := l.Addr(i).String()
		if out, err := cli.Run(ctx, "ip", "addr", "add", a+"/24", "dev", netlab.Iface); err != nil {
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

	t.Run("registered machines boot", func(t *testing.T) {
		// Retransmit timeouts scaled down, so that a machine that fails
		// does so within the test's time; a healthy boot needs none.
		res := stormRun(append(common, "-window", "1s", "-timescale", "0.1", "-kernel-sha256", khex, "-initrd-sha256", ihex, "-machine-timeout", "60s")...)
		want := outcome{Machines: n, Done: n, BIOS: n / 2, UEFI: n / 2, StepCounts: allSteps(n)}
		if diff := cmp.Diff(want, outcomeOf(res)); diff != "" {
			t.Fatalf("outcome (-want +got):\n%s\nfailures: %+v", diff, res.Failures)
		}
		fs := map[string]int64{"bios": fileSize(t, "/usr/lib/ipxe/undionly.kpxe"), "uefi": fileSize(t, "/usr/lib/ipxe/ipxe.efi")}
		base := "http://" + addr + ":8080"
		// siteboot's offers name the files: no request to port 4011.
		if res.DHCP.Requests != 0 {
			t.Errorf("dhcp %+v: requests to port 4011", res.DHCP)
		}
		for _, m := range res.MachineList {
			wantFile := map[string]string{"bios": "undionly.kpxe", "uefi": "ipxe.efi"}[m.Kind]
			if m.BootFile != wantFile || m.BootServer != "" || m.IPXEServer != "" || m.ProxyRequests != 0 ||
				m.ScriptURL != base+"/boot.ipxe" || m.Kernel != base+"/cache/"+khex ||
				len(m.Initrds) != 1 || m.Initrds[0] != base+"/cache/"+ihex ||
				m.Bytes != fs[m.Kind]+int64(len(kernel)+len(initrd)) {
				t.Errorf("machine %d: %+v", m.Index, m)
			}
		}
		var table strings.Builder
		if err := writeTable(&table, res); err != nil {
			t.Fatal(err)
		}
		t.Logf("storm against siteboot:\n%s", table.String())
	})

	t.Run("UEFI HTTP boot", func(t *testing.T) {
		res := stormRun(append(httpBoot, "-window", "0s", "-timescale", "0.1", "-machine-timeout", "60s")...)
		want := outcome{Machines: 2, Done: 2, UEFIHTTP: 2, StepCounts: allSteps(2)}
		if diff := cmp.Diff(want, outcomeOf(res)); diff != "" {
			t.Fatalf("outcome (-want +got):\n%s\nfailures: %+v", diff, res.Failures)
		}
		for _, m := range res.MachineList {
			if m.BootFile != "http://"+addr+":8080/boot/ipxe.efi" || m.TFTPRetransmits != 0 ||
				m.Bytes != fileSize(t, "/usr/lib/ipxe/ipxe.efi")+int64(len(kernel)+len(initrd)) {
				t.Errorf("machine %d: %+v", m.Index, m)
			}
		}
	})

	t.Run("machines without an entry get no offer", func(t *testing.T) {
		res := stormRun("-n", "3", "-mac-prefix", "02:5d", "-window", "0s", "-timescale", "0.05", "-machine-timeout", "20s")
		if res.Done != 0 || len(res.Failures) != 1 || res.Failures[0].Step != stepPXEDHCP ||
			res.Failures[0].Reason != "no-offer" || res.Failures[0].Count != 3 {
			t.Errorf("failures %+v, want 3 at %s for no-offer", res.Failures, stepPXEDHCP)
		}
	})
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
