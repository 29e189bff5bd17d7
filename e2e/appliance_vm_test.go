package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/internal/netlab"
	"github.com/siteboot/siteboot/internal/testpki"
	"google.golang.org/protobuf/encoding/protojson"
)

// Timings of the appliance VM under TCG (docs/appliance.md: 75-100 s from
// power-on to siteboot ready on these machines).
const (
	applianceReadyTimeout = 5 * time.Minute
	applianceStopTimeout  = 2 * time.Minute
	// adminPort is the admin API's mutual-TLS port on the VM.
	adminPort = 8443
	// applianceHost is the host part of the VM's static address: below the
	// lab's DHCP pool (.100-.199) and above its hosts (.2, .3, …).
	applianceHost = 50
	// applianceName is the config drive's hostname.
	applianceName = "siteboot-e2e"
)

// TestApplianceVM: the VM image `make appliance` builds, booted under
// SeaBIOS (QEMU TCG) from a qcow2 overlay with a config drive (siteboot.yaml,
// TLS files, a static address, a root password, the upgrade .deb as an
// extra file) and a blank data disk, becomes ready on the lab's LAN and
// answers the admin API over mutual TLS only to a client certificate of
// the configured CA. An entry added over it makes a SeaBIOS VM PXE-boot
// from the appliance to its script and ramdisk, seen by the origin and in
// the appliance's journal on its serial console. On the ttyS1 console (root
// login) siteboot runs as the packaged service, as the siteboot user, on
// the formatted data disk. A fresh overlay of the image (an image upgrade)
// with the same data disk and config drive still lists the entry with the
// same node key; `dpkg -i` of a higher .deb restarts it with the data
// kept; `dpkg --purge` removes the unit and the binary.
func TestApplianceVM(t *testing.T) {
	netlab.Require(t, netlab.NeedsDnsmasq(), netlab.NeedsVM(netlab.BIOS), netlab.Needs{
		Binaries: []string{"make", "git", "go", "xorriso", "qemu-img", "openssl", "dpkg", "dpkg-deb", "blkid",
			// packaging/appliance/build's own.
			"debootstrap", "mkfs.ext4", "mkfs.vfat", "mmd", "mcopy", "sfdisk", "chroot"},
		Files: []string{lkrnFile},
	})
	began := time.Now()
	phase := func(name string) { t.Logf("=== %s (%s into the test)", name, time.Since(began).Round(time.Second)) }

	phase("make appliance, and the upgrade .deb")
	img := buildApplianceImage(t)
	kernel, err := os.ReadFile(lkrnFile)
	if err != nil {
		t.Fatal(err)
	}
	initrd := bytes.Repeat([]byte("siteboot appliance VM initrd\n"), 512)

	phase("boot the appliance VM (config drive, blank data disk)")
	b := newBootLabWith(t, map[string][]byte{kernelPath: kernel, initrdPath: initrd}, img.start)
	app := b.app
	st := img.status(t)
	nodeKey := st.GetNodeKeyId()
	if st.GetSiteId() != "e2e" || st.GetNodeId() != "appliance" || st.GetVersion() != img.version {
		t.Errorf("status: site %q node %q version %q; want the config drive's e2e and appliance, and the image's %s",
			st.GetSiteId(), st.GetNodeId(), st.GetVersion(), img.version)
	}
	img.checkDataDiskFormatted(t)

	phase("admin API: mutual TLS only")
	img.checkMutualTLS(t)

	phase("PXE boot of a SeaBIOS VM from the appliance")
	bios := bootCases()[0]
	pxe := bootWithEntry(t, b, bios)
	pxe.Stop()
	pxeMAC := pxe.MAC.String()
	img.checkEntry(t, "the PXE boot", pxeMAC)

	phase("the console: siteboot as the packaged service on the data disk")
	con := img.login(t)
	img.checkService(t, con)
	img.checkHostname(t, con)

	phase("an image upgrade: a fresh overlay, the same data disk and config drive")
	img.powerOff(t, con)
	img.boot(t)
	if got := img.status(t).GetNodeKeyId(); got != nodeKey {
		t.Errorf("node key after booting a fresh image = %q; want %q (the data disk's)", got, nodeKey)
	}
	img.checkEntry(t, "booting a fresh image", pxeMAC)
	con = img.login(t)
	img.checkService(t, con)

	phase("dpkg -i of a higher .deb")
	img.upgradeDeb(t, con)
	st = img.status(t)
	if st.GetVersion() != img.upgradeVersion || st.GetNodeKeyId() != nodeKey {
		t.Errorf("after the upgrade: version %q, node key %q; want %s and %s", st.GetVersion(), st.GetNodeKeyId(), img.upgradeVersion, nodeKey)
	}
	img.checkEntry(t, "the .deb upgrade", pxeMAC)

	phase("dpkg --purge")
	img.purge(t, con)
	if out, err := app.cli(b.lab.Context(), "--timeout", "5s", "status"); err == nil {
		t.Errorf("the admin API still answers after the purge:\n%s", out)
	}
	phase("done")
}

// applianceImage is the image built for one run, and the VM booted from it.
type applianceImage struct {
	// qcow2 is the image as built, kept pristine: every boot gets an overlay.
	qcow2 string
	// cli is the static binary built with it, used as the operator's CLI.
	cli string
	// version is what the image's siteboot reports, debVersion its package;
	// upgrade* the higher .deb's.
	version, debVersion                string
	upgrade, upgradeVersion, upgradeDV string
	dir                                string

	// Set by start.
	lab      *netlab.Lab
	addr     netip.Addr
	mac      net.HardwareAddr
	iso      string
	data     string
	password string
	app      *appliance
	// pki: the server's CA (the CLI's --tls-ca), the operator's client
	// certificate from the CA the appliance trusts, and one from another CA.
	serverCA *x509.CertPool
	client   tls.Certificate
	rogue    tls.Certificate
	rogueCLI []string

	// The VM running now, and its ttyS1 console socket.
	boots int
	vm    *netlab.VM
	ttyS1 string
	// transcripts of the ttyS1 sessions, for failure reports.
	transcripts []string
}

// buildApplianceImage runs `make appliance` into a scratch dist directory
// with a version of its own, and `make deb` of a higher version into
// another (the upgrade), so the test runs what is shipped.
func buildApplianceImage(t *testing.T) *applianceImage {
	t.Helper()
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	// Debian versions of the test's own, so that the upgrade sorts higher
	// whatever the checkout's tags are.
	img := &applianceImage{
		version: "e2e-" + id, debVersion: "0.0.1~e2e." + id,
		upgradeVersion: "e2e-" + id + "-up", upgradeDV: "0.0.1~e2e." + id + "+up",
		dir: t.TempDir(),
	}
	if err := exec.Command("dpkg", "--compare-versions", img.debVersion, "lt", img.upgradeDV).Run(); err != nil {
		t.Fatalf("dpkg: %s does not sort before %s: %v", img.debVersion, img.upgradeDV, err)
	}
	dist, dist2 := filepath.Join(img.dir, "dist"), filepath.Join(img.dir, "dist-upgrade")
	build := func(target, dist, version, debVersion string) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		start := time.Now()
		cmd := exec.CommandContext(ctx, "make", "-C", "..", target, "DIST="+dist, "VERSION="+version, "DEB_VERSION="+debVersion)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make %s: %v\n%s", target, err, lastBytes(string(out), 8192))
		}
		t.Logf("make %s: %s", target, time.Since(start).Round(100*time.Millisecond))
	}
	build("appliance", dist, img.version, img.debVersion)
	build("deb", dist2, img.upgradeVersion, img.upgradeDV)
	img.qcow2 = filepath.Join(dist, "siteboot-appliance-"+img.version+".qcow2")
	img.cli = filepath.Join(dist, "siteboot")
	arch, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		t.Fatal(err)
	}
	img.upgrade = filepath.Join(dist2, "siteboot_"+img.upgradeDV+"_"+strings.TrimSpace(string(arch))+".deb")
	for _, f := range []string{img.qcow2, img.cli, img.upgrade} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the build did not write %s: %v", f, err)
		}
	}
	// The raw image is not used: its space back at once.
	_ = os.Remove(strings.TrimSuffix(img.qcow2, ".qcow2") + ".raw")
	return img
}

// start is the applianceStarter of the lab: h is the operator's host (the
// CLI and the metrics scrape run there); the appliance itself is a VM at
// a static address on h's LAN.
func (img *applianceImage) start(t *testing.T, h *netlab.Host, cfg applianceConfig) *appliance {
	t.Helper()
	img.lab = h.Lab()
	img.addr = img.lab.Addr(applianceHost)
	img.mac = netlab.RandomMAC()
	pki := filepath.Join(img.dir, "pki")
	if err := os.Mkdir(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	drive := img.makePKI(t, pki)
	img.makeConfigDrive(t, cfg, drive)
	img.data = filepath.Join(img.dir, "data.raw")
	if err := os.WriteFile(img.data, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img.data, 512<<20); err != nil {
		t.Fatal(err)
	}
	img.app = &appliance{
		t: t, bin: img.cli, host: h,
		server: []string{"--server", netip.AddrPortFrom(img.addr, adminPort).String(),
			"--tls-ca", filepath.Join(pki, "server-ca.pem"),
			"--tls-cert", filepath.Join(pki, "operator.pem"), "--tls-key", filepath.Join(pki, "operator.key")},
		base: fmt.Sprintf("http://%s:%d", img.addr, httpPort),
		http: newLabHTTPClient(h),
	}
	img.rogueCLI = []string{"--server", netip.AddrPortFrom(img.addr, adminPort).String(),
		"--tls-ca", filepath.Join(pki, "server-ca.pem"),
		"--tls-cert", filepath.Join(pki, "rogue.pem"), "--tls-key", filepath.Join(pki, "rogue.key")}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if img.vm != nil {
			b, _ := os.ReadFile(img.vm.Serial)
			t.Logf("appliance VM ttyS0 (boot %d, last 6 KiB):\n%s", img.boots, lastBytes(string(b), 6144))
		}
		for _, p := range img.transcripts {
			b, _ := os.ReadFile(p)
			t.Logf("%s (last 3 KiB):\n%s", filepath.Base(p), lastBytes(string(b), 3072))
		}
	})
	img.boot(t)
	return img.app
}

// makePKI writes the CLI's files into dir and returns the config drive's
// tls/ files: the server's certificate for the VM's address from one CA,
// the CA of the operators' client certificates from another. A third CA
// issues a client certificate the appliance must refuse.
func (img *applianceImage) makePKI(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	serverCA := testpki.NewCA(t, "siteboot e2e appliance CA")
	clientCA := testpki.NewCA(t, "siteboot e2e operators CA")
	rogueCA := testpki.NewCA(t, "siteboot e2e rogue CA")
	srvCert, srvKey := serverCA.Issue(t, "appliance", testpki.Leaf{IPs: []net.IP{img.addr.AsSlice()}})
	opCert, opKey := clientCA.Issue(t, "operator", testpki.Leaf{Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	rogueCert, rogueKey := rogueCA.Issue(t, "operator", testpki.Leaf{Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	files := map[string][]byte{
		"server-ca.pem": serverCA.PEM, "operator.pem": opCert, "operator.key": opKey,
		"rogue.pem": rogueCert, "rogue.key": rogueKey,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if img.client, err = tls.X509KeyPair(opCert, opKey); err != nil {
		t.Fatal(err)
	}
	if img.rogue, err = tls.X509KeyPair(rogueCert, rogueKey); err != nil {
		t.Fatal(err)
	}
	img.serverCA = x509.NewCertPool()
	img.serverCA.AddCert(serverCA.Cert)
	return map[string][]byte{"server.pem": srvCert, "server.key": srvKey, "clients-ca.pem": clientCA.PEM}
}

// makeConfigDrive writes the config drive ISO: siteboot.yaml, tls/, the
// static address, the hostname, root's password hash, and the upgrade .deb
// as an extra file the image ignores.
func (img *applianceImage) makeConfigDrive(t *testing.T, cfg applianceConfig, tlsFiles map[string][]byte) {
	t.Helper()
	root := filepath.Join(img.dir, "drive")
	img.password = randomPassword(t)
	hash, err := passwordHash(img.password)
	if err != nil {
		t.Fatal(err)
	}
	deb, err := os.ReadFile(img.upgrade)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"siteboot.yaml":          []byte(vmApplianceYAML(img.addr, cfg)),
		"network/10-lab.network": []byte(labNetwork(img.addr)),
		"hostname":               []byte(applianceName + "\n"),
		"root-password-hash":     []byte(hash + "\n"),
		"upgrade.deb":            deb,
	}
	for name, data := range tlsFiles {
		files["tls/"+name] = data
	}
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img.iso = filepath.Join(img.dir, "config.iso")
	out, err := exec.Command("xorriso", "-as", "mkisofs", "-V", "SITEBOOT", "-J", "-R", "-o", img.iso, root).CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso: %v\n%s", err, out)
	}
}

// vmApplianceYAML is the config drive's siteboot.yaml: every service on the
// VM's static address (proxyDHCP on the interfaces that are up: the VM's
// interface name is the image's business), the admin API also over mutual
// TLS, the data dir the unit's default, debug logs in JSON (to the journal,
// thus the console).
func vmApplianceYAML(addr netip.Addr, cfg applianceConfig) string {
	a := addr.String()
	return strings.Join([]string{
		"site_id: e2e",
		"node_id: appliance",
		"admin:",
		fmt.Sprintf("  tcp_listen: %s:%d", a, adminPort),
		"  tls:",
		"    cert: /etc/siteboot/tls/server.pem",
		"    key: /etc/siteboot/tls/server.key",
		"    client_ca: /etc/siteboot/tls/clients-ca.pem",
		"http:",
		fmt.Sprintf("  listen: %s:%d", a, httpPort),
		"dhcp:",
		"  enabled: true",
		"tftp:",
		"  listen: " + a + ":69",
		"ramdisk:",
		"  kernel: " + cfg.KernelURL,
		"  initrd: " + cfg.InitrdURL,
		"  cmdline: console=ttyS0",
		"log:",
		"  level: debug",
		"  format: json",
	}, "\n") + "\n" + strings.Join(append(cfg.Extra, ""), "\n")
}

// labNetwork is the config drive's networkd file: the static address on
// whatever the VM's Ethernet interface is called.
func labNetwork(addr netip.Addr) string {
	return "[Match]\nName=en* eth*\n\n[Network]\nAddress=" + netip.PrefixFrom(addr, 24).String() +
		"\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n"
}

func randomPassword(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// passwordHash is `openssl passwd -6` of password, the password on stdin
// rather than in a command line.
func passwordHash(password string) (string, error) {
	cmd := exec.Command("openssl", "passwd", "-6", "-stdin")
	cmd.Stdin = strings.NewReader(password + "\n")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("openssl passwd -6: %w", err)
	}
	hash := strings.TrimSpace(string(out))
	if !strings.HasPrefix(hash, "$6$") {
		return "", fmt.Errorf("openssl passwd -6 printed %q, not a SHA-512 crypt hash", hash)
	}
	return hash, nil
}

// boot starts the VM from a fresh overlay of the image, with the data disk
// and the config drive, and waits until siteboot answers ready over the
// admin API.
func (img *applianceImage) boot(t *testing.T) {
	t.Helper()
	img.boots++
	label := "appliance" + strconv.Itoa(img.boots)
	overlay := filepath.Join(img.dir, label+".qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", img.qcow2, overlay).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create the overlay: %v\n%s", err, out)
	}
	img.ttyS1 = filepath.Join(img.lab.Dir(), label+"-ttyS1.sock")
	if len(img.ttyS1) > 100 {
		t.Fatalf("console socket path too long: %s", img.ttyS1)
	}
	img.vm = img.lab.StartVM(netlab.VMConfig{
		Label: label, Firmware: netlab.BIOS, MAC: img.mac, MemoryMB: 1024, Boot: "c",
		Extra: []string{
			"-drive", "file=" + overlay + ",if=virtio,format=qcow2",
			"-drive", "file=" + img.data + ",if=virtio,format=raw",
			"-drive", "file=" + img.iso + ",media=cdrom,format=raw",
			"-serial", "unix:" + img.ttyS1 + ",server=on,wait=off",
		},
	})
	img.app.journal = img.vm.Serial
	start := time.Now()
	ctx, cancel := context.WithTimeout(img.lab.Context(), applianceReadyTimeout)
	defer cancel()
	var last string
	for {
		out, err := img.app.cli(ctx, "--timeout", "10s", "status", "-o", "json")
		st := &sitebootv1.GetStatusResponse{}
		switch {
		case err != nil:
			last = err.Error()
		case protojson.Unmarshal(out, st) != nil:
			last = "status -o json: " + string(out)
		case st.GetReady():
			t.Logf("%s: siteboot ready over mutual TLS %s after power-on", label, time.Since(start).Round(100*time.Millisecond))
			return
		default:
			last = "not ready: " + st.GetNotReadyReason()
		}
		select {
		case <-img.vm.Done():
			t.Fatalf("%s: qemu exited before siteboot was ready: %v (last status: %s)", label, img.vm.Err(), last)
		case <-ctx.Done():
			t.Fatalf("%s: siteboot not ready over mutual TLS %s after power-on; last status: %s", label, time.Since(start).Round(time.Second), last)
		case <-time.After(3 * time.Second):
		}
	}
}

// status is `siteboot status -o json` over mutual TLS.
func (img *applianceImage) status(t *testing.T) *sitebootv1.GetStatusResponse {
	t.Helper()
	st := &sitebootv1.GetStatusResponse{}
	img.app.cliJSON(img.lab.Context(), st, "status")
	return st
}

// checkEntry: `entry ls` over mutual TLS lists node-bios with mac.
func (img *applianceImage) checkEntry(t *testing.T, after, mac string) {
	t.Helper()
	resp := &sitebootv1.ListEntriesResponse{}
	img.app.cliJSON(img.lab.Context(), resp, "entry", "ls", "--node-id", "node-bios")
	var macs []string
	for _, e := range resp.GetEntries() {
		macs = append(macs, e.GetEntry().GetMac())
	}
	if !slices.Contains(macs, mac) {
		t.Errorf("after %s, entry ls --node-id node-bios lists MACs %v; want %s", after, macs, mac)
	}
}

// checkDataDiskFormatted: seen from the host, the blank data disk now
// holds the ext4 file system labelled siteboot-data.
func (img *applianceImage) checkDataDiskFormatted(t *testing.T) {
	t.Helper()
	out, err := exec.Command("blkid", "-p", "-o", "export", img.data).Output()
	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	if err != nil || got["LABEL"] != "siteboot-data" || got["TYPE"] != "ext4" {
		t.Errorf("blkid of the data disk: %v, %q; want an ext4 file system labelled siteboot-data", err, out)
	}
}

// checkMutualTLS: the admin API refuses a client certificate from a CA
// other than admin.tls.client_ca and a client without one, while the
// operator's certificate gets the gRPC server's HTTP/2 preface. (The CLI
// given the other CA's certificate fails too, but Go's TLS client does not
// send a certificate of a CA the server does not name, so the CLI's case
// is the server seeing none.)
func (img *applianceImage) checkMutualTLS(t *testing.T) {
	t.Helper()
	ctx := img.lab.Context()
	rogue := *img.app
	rogue.server = img.rogueCLI
	if out, err := rogue.cli(ctx, "--timeout", "5s", "status"); err == nil {
		t.Errorf("status with a client certificate of another CA answered:\n%s", out)
	} else {
		t.Logf("status with a client certificate of another CA: %v", err)
	}
	addr := netip.AddrPortFrom(img.addr, adminPort).String()
	if err := img.tlsProbe(ctx, addr, &img.client); err != nil {
		t.Errorf("TLS to %s with the operator's certificate: %v; want the server's first bytes", addr, err)
	}
	for _, tc := range []struct {
		name   string
		cert   *tls.Certificate
		alerts []string
	}{
		// The server verified the chain and refused it.
		{"a certificate of another CA", &img.rogue, []string{"tls: bad certificate", "tls: unknown certificate authority"}},
		{"no certificate", nil, []string{"tls: certificate required"}},
	} {
		err := img.tlsProbe(ctx, addr, tc.cert)
		if err == nil || !slices.ContainsFunc(tc.alerts, func(a string) bool { return strings.Contains(err.Error(), a) }) {
			t.Errorf("TLS to %s with %s: %v; want the alert %q", addr, tc.name, err, tc.alerts)
		} else {
			t.Logf("TLS to %s with %s: %v", addr, tc.name, err)
		}
	}
}

// tlsProbe connects from the operator's host, completes a TLS 1.3
// handshake (the server checks the client's certificate after it) and
// reads: the gRPC server speaks first (its HTTP/2 settings), while a
// refused client gets the server's alert.
func (img *applianceImage) tlsProbe(ctx context.Context, addr string, cert *tls.Certificate) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	raw, err := dialIn(img.app.host)(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	conf := &tls.Config{RootCAs: img.serverCA, ServerName: img.addr.String(), NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13}
	if cert != nil {
		// Sent whatever CAs the server names as acceptable: Go's own
		// choice would leave out a certificate of another CA, as the CLI
		// does, and the server would only see none.
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	conn := tls.Client(raw, conf)
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if err := conn.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	b := make([]byte, 9) // an HTTP/2 frame header
	if _, err := conn.Read(b); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}

// login connects to the VM's ttyS1 and logs in as root with the config
// drive's password. The console is closed when the test ends.
func (img *applianceImage) login(t *testing.T) *console {
	t.Helper()
	ctx, cancel := context.WithTimeout(img.lab.Context(), 2*time.Minute)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", img.ttyS1)
	if err != nil {
		t.Fatalf("ttyS1 console: %v", err)
	}
	path := strings.TrimSuffix(img.ttyS1, ".sock") + ".log"
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	img.transcripts = append(img.transcripts, path)
	c := newConsole(conn, f)
	t.Cleanup(func() {
		c.Close()
		f.Close()
	})
	start := time.Now()
	if err := c.login(ctx, "root", img.password); err != nil {
		t.Fatalf("root login on ttyS1: %v", err)
	}
	t.Logf("root login on ttyS1: %s", time.Since(start).Round(100*time.Millisecond))
	return c
}

// sh runs cmd on the console within timeout; a console that stops
// answering fails the test, a command's status is the caller's to judge.
func (img *applianceImage) sh(t *testing.T, c *console, timeout time.Duration, cmd string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(img.lab.Context(), timeout)
	defer cancel()
	out, rc, err := c.run(ctx, cmd)
	if err != nil {
		t.Fatalf("console: %v", err)
	}
	return out, rc
}

// expectSh runs cmd and checks its output and status; a mismatch is an
// error, not fatal, so the other checks still run.
func (img *applianceImage) expectSh(t *testing.T, c *console, cmd, want string, wantRC int) bool {
	t.Helper()
	out, rc := img.sh(t, c, 30*time.Second, cmd)
	if strings.TrimSpace(out) != want || rc != wantRC {
		t.Errorf("on the appliance: %s = %q, exit %d; want %q, exit %d", cmd, strings.TrimSpace(out), rc, want, wantRC)
		return false
	}
	return true
}

// checkService: siteboot is the packaged unit, active, running as the
// siteboot user, its state on the data disk (the second virtio disk,
// formatted on first boot).
func (img *applianceImage) checkService(t *testing.T, c *console) {
	t.Helper()
	img.expectSh(t, c, "systemctl is-active siteboot", "active", 0)
	img.expectSh(t, c, "systemctl show -p User siteboot", "User=siteboot", 0)
	img.expectSh(t, c, "stat -c %U /proc/$(systemctl show -p MainPID --value siteboot)", "siteboot", 0)
	img.expectSh(t, c, "findmnt -n -r -o SOURCE,FSTYPE,LABEL /var/lib/siteboot", "/dev/vdb ext4 siteboot-data", 0)
}

// checkHostname: the config drive's hostname holds.
func (img *applianceImage) checkHostname(t *testing.T, c *console) {
	t.Helper()
	img.expectSh(t, c, "hostname", applianceName, 0)
}

// powerOff shuts the VM down from its console, as an operator replacing
// the boot disk would, and waits for QEMU to exit.
func (img *applianceImage) powerOff(t *testing.T, c *console) {
	t.Helper()
	c.note("systemctl poweroff")
	if err := c.send("systemctl poweroff\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case <-img.vm.Done():
		t.Logf("%s powered off in %s (qemu: %v)", filepath.Base(img.ttyS1), time.Since(start).Round(100*time.Millisecond), img.vm.Err())
	case <-time.After(applianceStopTimeout):
		t.Fatalf("the appliance VM did not power off within %s", applianceStopTimeout)
	}
	c.Close()
}

// upgradeDeb installs the config drive's higher .deb with dpkg -i: the
// package is the new version, the service active again (postinst restarts
// it), and the config drive's siteboot.yaml still in place (the conffile is
// unchanged in the package, so dpkg keeps the local file without asking;
// stdin is /dev/null, so a question would fail the step, not hang it).
func (img *applianceImage) upgradeDeb(t *testing.T, c *console) {
	t.Helper()
	img.expectSh(t, c, "dpkg-query -W -f '${Version}' siteboot", img.debVersion, 0)
	if !img.expectSh(t, c, "mkdir -p /run/e2e-drive && mount -o ro /dev/disk/by-label/SITEBOOT /run/e2e-drive", "", 0) {
		return
	}
	start := time.Now()
	out, rc := img.sh(t, c, 4*time.Minute, "dpkg -i /run/e2e-drive/upgrade.deb 2>&1")
	t.Logf("dpkg -i upgrade.deb: exit %d after %s:\n%s", rc, time.Since(start).Round(100*time.Millisecond), out)
	if rc != 0 {
		t.Errorf("dpkg -i of the upgrade .deb exited %d", rc)
	}
	img.sh(t, c, 30*time.Second, "umount /run/e2e-drive")
	img.expectSh(t, c, "dpkg-query -W -f '${Version}' siteboot", img.upgradeDV, 0)
	img.waitActive(t, c)
	img.expectSh(t, c, "grep -c '^site_id: e2e$' /etc/siteboot/siteboot.yaml", "1", 0)
	img.expectSh(t, c, "siteboot version | cut -d' ' -f2", img.upgradeVersion, 0)
}

// waitActive waits up to two minutes for the service to be active.
func (img *applianceImage) waitActive(t *testing.T, c *console) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _ := img.sh(t, c, 30*time.Second, "systemctl is-active siteboot")
		if strings.TrimSpace(out) == "active" {
			return
		}
		if time.Now().After(deadline) {
			out, _ := img.sh(t, c, 30*time.Second, "systemctl status --no-pager siteboot 2>&1 | tail -n 20")
			t.Fatalf("siteboot not active 2 min after the upgrade:\n%s", out)
		}
		time.Sleep(2 * time.Second)
	}
}

// purge: dpkg --purge removes the unit (no longer active, not found) and
// the binary.
func (img *applianceImage) purge(t *testing.T, c *console) {
	t.Helper()
	out, rc := img.sh(t, c, 3*time.Minute, "dpkg --purge siteboot 2>&1")
	t.Logf("dpkg --purge siteboot: exit %d:\n%s", rc, out)
	if rc != 0 {
		t.Errorf("dpkg --purge siteboot exited %d", rc)
	}
	if out, rc := img.sh(t, c, 30*time.Second, "systemctl is-active siteboot"); rc == 0 {
		t.Errorf("after the purge, systemctl is-active siteboot = %q, exit 0; want a failure", strings.TrimSpace(out))
	}
	img.expectSh(t, c, "systemctl show -p LoadState siteboot", "LoadState=not-found", 0)
	img.expectSh(t, c, "test -e /usr/bin/siteboot", "", 1)
}

// newLabHTTPClient is an HTTP client dialling from inside h's namespace.
func newLabHTTPClient(h *netlab.Host) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: dialIn(h)}}
}

// journalOf returns the messages that journald forwarded to the console
// for ident ("<ident>[<pid>]: <message>" lines, maybe after a time stamp),
// one a line; other lines, and lines cut into by kernel messages, are
// dropped or left unparsable.
func journalOf(console, ident string) string {
	var b strings.Builder
	tag := ident + "["
	for _, line := range strings.Split(console, "\n") {
		i := strings.Index(line, tag)
		if i < 0 {
			continue
		}
		rest := line[i+len(tag):]
		j := strings.Index(rest, "]: ")
		if j < 0 {
			continue
		}
		if _, err := strconv.Atoi(rest[:j]); err != nil {
			continue
		}
		b.WriteString(strings.TrimRight(rest[j+3:], "\r"))
		b.WriteByte('\n')
	}
	return b.String()
}
