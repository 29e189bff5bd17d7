package ipxe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/siteboot/siteboot/internal/logbuf"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteboot/siteboot/discovery"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/netlab"
	"github.com/siteboot/siteboot/secretref"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Files from Debian's ipxe package: iPXE as a bzImage (a kernel BIOS iPXE
// boots), as an EFI application (a "kernel" UEFI iPXE boots) and as a small
// bootable ISO (a sanboot target).
const (
	lkrnPath = "/usr/lib/ipxe/ipxe.lkrn"
	efiPath  = "/usr/lib/ipxe/ipxe.efi"
	isoPath  = "/usr/lib/ipxe/ipxe.iso"
)

// TestE2EBIOS boots three BIOS VMs (SeaBIOS + the virtio-net iPXE ROM) on
// a private LAN whose DHCP server (dnsmasq) points iPXE at this package's
// real handler: one VM has a ramdisk entry and must fetch the kernel and
// then the initrd its script names, one has a sanboot entry and must read
// the ISO with range requests, one has no entry and must be told so (and
// stay out of the discovery ledger: only DHCP feeds it, and dnsmasq
// answers DHCP here). Success is seen from the server.
func TestE2EBIOS(t *testing.T) {
	runE2E(t, netlab.BIOS, lkrnPath, "ramdisk", "sanboot", "unknown")
}

// TestE2EUEFI: OVMF's PXE client fetches ipxe.efi over TFTP, then the
// x86_64 EFI iPXE runs the bootstrap and the ramdisk script (its "kernel"
// is an EFI application, which EFI iPXE loads the way it loads an EFI-stub
// Linux, with initrd=initrd on its command line).
func TestE2EUEFI(t *testing.T) {
	runE2E(t, netlab.UEFI, efiPath, "ramdisk")
}

func runE2E(t *testing.T, fw netlab.Firmware, kernelPath string, kinds ...string) {
	netlab.Require(t, netlab.NeedsDnsmasq(), netlab.NeedsVM(fw), netlab.Needs{Files: []string{kernelPath, isoPath}})
	lab := netlab.New(t, netlab.Config{})
	ctx, cancel := context.WithTimeout(lab.Context(), 4*time.Minute)
	defer cancel()

	blobs := loadBlobs(t, kernelPath)
	vms := map[string]net.HardwareAddr{}
	for _, k := range kinds {
		vms[k] = netlab.RandomMAC()
	}
	dhcpHost, web := lab.AddHost("dhcp"), lab.AddHost("web")
	ln, err := web.Listen(ctx, "tcp4", web.Addr().String()+":8080")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	logs := &logbuf.Buffer{}
	e2e := newE2EServer(t, base, blobs, vms, logs)
	serveHTTP(t, ln, e2e)
	dhcpHost.StartDnsmasq(netlab.DnsmasqConfig{Extra: []string{
		"--enable-tftp", "--tftp-root=/usr/lib/ipxe",
		"--dhcp-userclass=set:ipxe,iPXE",
		"--dhcp-match=set:efi64,option:client-arch,7",
		"--dhcp-boot=tag:ipxe," + base + "/boot.ipxe",
		"--dhcp-boot=tag:!ipxe,tag:efi64,ipxe.efi",
	}})
	running := map[string]*netlab.VM{}
	for name, mac := range vms {
		// A VM whose first DHCP try goes unanswered (three TCG guests on
		// two busy cores) boots again instead of halting for good.
		running[name] = lab.StartVM(netlab.VMConfig{Label: name, MAC: mac, Firmware: fw, RetryBoot: 3 * time.Second})
	}
	start := time.Now()
	for !e2e.done(blobs, vms) {
		// A VM that got as far as its kind allows is switched off, so that
		// it stops taking CPU from the ones still booting (the sanboot VM
		// would otherwise boot its ISO's iPXE again and again).
		for name, vm := range running {
			if e2e.reachedVM(blobs, name, vms[name]) {
				vm.Stop()
				delete(running, name)
			}
		}
		select {
		case <-ctx.Done():
			for name, vm := range running {
				shot := lab.Dir() + "/" + name + ".ppm"
				_ = vm.Screendump(context.Background(), shot)
				serial, _ := os.ReadFile(vm.Serial)
				t.Logf("%s VM %s did not get as far as it should: screen in %s; serial console (last 2 KiB):\n%s",
					name, vm.MAC, shot, lastBytes(serial, 2048))
			}
			t.Fatalf("not every %s VM got as far as it should in time; requests seen:\n%s\nhandler log:\n%s", fw, e2e.hits(), logs)
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Logf("%s VMs %v done after %v; requests:\n%s\nhandler log:\n%s", fw, kinds, time.Since(start).Round(100*time.Millisecond), e2e.hits(), logs)
	if got := e2e.ledger.List(); len(got) != 0 {
		t.Errorf("script requests put machines into the discovery ledger: %v", got)
	}
}

type blobSet struct {
	kernel, initrd, iso []byte
}

func (b blobSet) hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func loadBlobs(t *testing.T, kernelPath string) blobSet {
	t.Helper()
	kernel, err := os.ReadFile(kernelPath)
	if err != nil {
		t.Fatal(err)
	}
	iso, err := os.ReadFile(isoPath)
	if err != nil {
		t.Fatal(err)
	}
	return blobSet{kernel: kernel, initrd: bytes.Repeat([]byte("siteboot initrd\n"), 256), iso: iso}
}

// e2eServer is the ipxe handler plus a stand-in for the image cache's
// /cache/<hex> (http.ServeContent: HEAD and single ranges), recording every
// request.
type e2eServer struct {
	ipxe   http.Handler
	ledger *discovery.Ledger
	blobs  map[string][]byte

	mu          sync.Mutex
	log         []hit
	byIP        map[string]string // remote IP → MAC it asked /ipxe for
	toldUnknown map[string]bool   // MACs served the unknown-machine script
}

type hit struct {
	remote, method, uri, rng string
	status                   int
}

func newE2EServer(t *testing.T, base string, b blobSet, vms map[string]net.HardwareAddr, logs *logbuf.Buffer) *e2eServer {
	t.Helper()
	key, err := discovery.LoadOrCreateKey(t.TempDir() + "/node.key")
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := discovery.OpenLedger(discovery.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	state := site.NewState()
	fx := &fixture{state: state}
	notAfter := timestamppb.New(time.Now().Add(time.Hour))
	isoSum := sha256.Sum256(b.iso)
	fx.put(t, "node-e2e",
		&sitev1.ProxyDhcpEntry{Mac: vms["ramdisk"].String(), WorkflowId: "wf-e2e", NotAfter: notAfter, DiscoveryTokenRef: "env://BC_TOKEN"},
		&sitev1.ProxyDhcpEntry{Mac: vms["sanboot"].String(), NotAfter: notAfter, SanbootSha256: isoSum[:]},
	)
	srv, err := New(Config{
		SiteID: testSite, NodeID: testNode, BaseURL: base,
		Ramdisk: Ramdisk{Kernel: "sha256:" + b.hex(b.kernel), Initrd: "sha256:" + b.hex(b.initrd), Cmdline: "console=ttyS0"},
		Logger:  slog.New(slog.NewTextHandler(logs, nil)),
		Entries: state, Gate: &testGate{epoch: 3, open: true}, Signer: key, Discovery: ledger,
		Secrets: secretref.Resolver{Policy: secretref.Policy{EnvPrefix: "BC_"}, LookupEnv: func(k string) (string, bool) { return "e2e-token", k == "BC_TOKEN" }},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &e2eServer{
		ipxe: srv.Handler(), ledger: ledger, byIP: map[string]string{}, toldUnknown: map[string]bool{},
		blobs: map[string][]byte{b.hex(b.kernel): b.kernel, b.hex(b.initrd): b.initrd, b.hex(b.iso): b.iso},
	}
}

func (s *e2eServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusWriter{ResponseWriter: w, status: http.StatusOK, body: &bytes.Buffer{}}
	if digest, ok := strings.CutPrefix(r.URL.Path, "/cache/"); ok {
		s.serveBlob(rec, r, digest)
	} else {
		s.ipxe.ServeHTTP(rec, r)
	}
	ip, _, _ := net.SplitHostPort(r.RemoteAddr)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Path == "/ipxe" {
		s.byIP[ip] = r.URL.Query().Get("mac")
		if strings.Contains(rec.body.String(), " is not registered at this site") {
			s.toldUnknown[r.URL.Query().Get("mac")] = true
		}
	}
	s.log = append(s.log, hit{remote: ip, method: r.Method, uri: r.URL.RequestURI(), rng: r.Header.Get("Range"), status: rec.status})
}

func (s *e2eServer) serveBlob(w http.ResponseWriter, r *http.Request, digest string) {
	data, ok := s.blobs[digest]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

// done reports whether each VM got as far as its kind allows.
func (s *e2eServer) done(b blobSet, vms map[string]net.HardwareAddr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for kind, mac := range vms {
		if !s.reached(b, kind, mac.String()) {
			return false
		}
	}
	return true
}

// reachedVM is reached for one VM, taking the lock.
func (s *e2eServer) reachedVM(b blobSet, kind string, mac net.HardwareAddr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reached(b, kind, mac.String())
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (s *e2eServer) reached(b blobSet, kind, mac string) bool {
	switch kind {
	case "ramdisk":
		return s.sawInOrder(mac, []string{"/ipxe?", "/cache/" + b.hex(b.kernel), "/cache/" + b.hex(b.initrd)})
	case "sanboot":
		for _, h := range s.log {
			if h.uri == "/cache/"+b.hex(b.iso) && h.status == http.StatusPartialContent && s.byIP[h.remote] == mac {
				return true
			}
		}
	case "unknown":
		return s.sawInOrder(mac, []string{"/ipxe?"}) && s.toldUnknown[mac]
	}
	return false
}

// sawInOrder: the VM asking for mac made 200 GETs starting with each prefix,
// in order.
func (s *e2eServer) sawInOrder(mac string, prefixes []string) bool {
	i := 0
	for _, h := range s.log {
		if i < len(prefixes) && s.byIP[h.remote] == mac && h.status == http.StatusOK && strings.HasPrefix(h.uri, prefixes[i]) {
			i++
		}
	}
	return i == len(prefixes)
}

func (s *e2eServer) hits() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, h := range s.log {
		fmt.Fprintf(&b, "%s %s %s %s -> %d\n", h.remote, h.method, h.uri, h.rng, h.status)
	}
	return b.String()
}

// statusWriter records the status, and the body of script answers (not
// of the large cache blobs).
type statusWriter struct {
	http.ResponseWriter
	status int
	body   *bytes.Buffer
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.body.Len() < 4096 {
		w.body.Write(p)
	}
	return w.ResponseWriter.Write(p)
}

func serveHTTP(t *testing.T, ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("http server: %v", err)
		}
	})
}
