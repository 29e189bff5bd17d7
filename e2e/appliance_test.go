package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/netlab"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// applianceConfig is what a test chooses of siteboot's configuration.
type applianceConfig struct {
	// KernelURL and InitrdURL are the ramdisk profile.
	KernelURL, InitrdURL string
	// Extra are further lines of the YAML file, whole top-level sections
	// (bmc:, secrets:, httpproxy:).
	Extra []string
}

// appliance is a `siteboot serve` process on a lab host: proc, or a
// container whose podman writes out; or the appliance VM, reached from
// host over the admin API's mutual TLS, its log in its serial console.
type appliance struct {
	t      *testing.T
	bin    string
	host   *netlab.Host
	proc   *netlab.Process
	out    *logged
	socket string
	// server are the CLI's flags for the admin API over mutual TLS
	// (--server, --tls-*) when the socket is not a file here (a VM); the
	// CLI then runs in host's namespace.
	server []string
	// journal is a serial console log carrying siteboot's journal (a VM).
	journal string
	// base is its HTTP base URL on the lab LAN.
	base string
	// http dials from inside the appliance's namespace (for /metrics).
	http *http.Client
}

// httpPort is the port siteboot's HTTP server listens on in the lab.
const httpPort = 8080

// startAppliance writes a config file, starts siteboot on h and waits until
// it holds the boot lease.
func startAppliance(t *testing.T, h *netlab.Host, cfg applianceConfig) *appliance {
	t.Helper()
	bin := sitebootBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	addr := h.Addr().String()
	path := filepath.Join(dir, "siteboot.yaml")
	if err := os.WriteFile(path, []byte(applianceYAML(h, cfg, data)), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &appliance{
		t: t, bin: bin, host: h, socket: filepath.Join(data, "siteboot.sock"),
		base: fmt.Sprintf("http://%s:%d", addr, httpPort),
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DisableKeepAlives: true, DialContext: dialIn(h),
		}},
	}
	a.proc = h.Start("siteboot", bin, "serve", "--config", path)
	ctx, cancel := context.WithTimeout(h.Lab().Context(), 30*time.Second)
	defer cancel()
	if _, err := a.proc.WaitOutput(ctx, msgReady); err != nil {
		t.Fatalf("siteboot did not become ready: %v\n%s", err, a.proc.Output())
	}
	return a
}

// applianceYAML is the config file of an appliance on h keeping its state
// in data: every service on h's LAN address, debug logs in JSON.
func applianceYAML(h *netlab.Host, cfg applianceConfig, data string) string {
	addr := h.Addr().String()
	return strings.Join([]string{
		"site_id: e2e",
		"node_id: " + h.Name(),
		"data_dir: " + data,
		"http:",
		fmt.Sprintf("  listen: %s:%d", addr, httpPort),
		"dhcp:",
		"  enabled: true",
		"  interfaces: [" + netlab.Iface + "]",
		"tftp:",
		"  listen: " + addr + ":69",
		"ramdisk:",
		"  kernel: " + cfg.KernelURL,
		"  initrd: " + cfg.InitrdURL,
		"  cmdline: console=ttyS0",
		"log:",
		"  level: debug",
		"  format: json",
	}, "\n") + "\n" + strings.Join(append(cfg.Extra, ""), "\n")
}

// dialIn dials TCP from inside h's network namespace.
func dialIn(h *netlab.Host) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := h.Do(func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// cli runs a siteboot client command against the appliance's socket from
// the test's own namespace (the socket is a file), or over mutual TLS from
// the host's, and returns its stdout.
func (a *appliance) cli(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.bin, append([]string{"--socket", a.socket}, args...)...)
	if a.server != nil {
		argv := append([]string{"netns", "exec", a.host.NS(), a.bin}, a.server...)
		cmd = exec.CommandContext(ctx, "ip", append(argv, args...)...)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("siteboot %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// mustCLI is cli that fails the test on error.
func (a *appliance) mustCLI(ctx context.Context, args ...string) []byte {
	a.t.Helper()
	out, err := a.cli(ctx, args...)
	if err != nil {
		a.t.Fatal(err)
	}
	return out
}

// cliJSON runs a client command with -o json and decodes its output.
func (a *appliance) cliJSON(ctx context.Context, into proto.Message, args ...string) {
	a.t.Helper()
	out := a.mustCLI(ctx, append(args, "-o", "json")...)
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(out, into); err != nil {
		a.t.Fatalf("siteboot %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// logs returns siteboot's JSON log lines so far.
func (a *appliance) logs() []logLine { return parseLog(a.output()) }

// output is what siteboot has written so far.
func (a *appliance) output() string {
	switch {
	case a.out != nil:
		return a.out.output()
	case a.journal != "":
		b, _ := os.ReadFile(a.journal)
		return journalOf(string(b), "siteboot")
	}
	return a.proc.Output()
}

// logDigest is the last n decision lines of the log, for failure reports.
func (a *appliance) logDigest(n int) string {
	var lines []string
	for _, l := range a.logs() {
		switch l.str("msg") {
		case msgDHCP, msgBootstrap, msgScript, msgUnknown, msgTFTP, msgCache:
			lines = append(lines, l.compact())
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
