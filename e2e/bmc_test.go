package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/internal/ipmisim"
	"github.com/siteboot/siteboot/internal/netlab"
)

// The simulated BMC's account.
const (
	bmcUser     = "admin"
	bmcPassword = "ipmiS3cret7Qx2vL"
)

// TestBMCPowerOnPXEBoots is the relays' flagship: ipmi_sim (real
// IPMI-over-LAN) runs on a lab host as the BMC of a machine that is a
// SeaBIOS VM; `siteboot bmc --driver ipmi … power.setPower on` makes
// ipmi_sim's chassis program start that VM, which PXE-boots from siteboot
// (its entry present: the /ipxe script is served to its MAC);
// power.getPower then says on, power off stops the VM, and with the entry
// removed the next power on leaves the machine unanswered and listed by
// `siteboot discovered ls`. management.setBootDevice pxe reaches the
// chassis. Only the CLI drives siteboot; siteboot dials the BMC itself.
func TestBMCPowerOnPXEBoots(t *testing.T) {
	netlab.Require(t, netlab.NeedsDnsmasq(), netlab.NeedsVM(netlab.BIOS), netlab.Needs{Binaries: []string{"ipmi_sim", "ipmitool"}})
	lab := netlab.New(t, netlab.Config{})
	dhcp, boot, bmcHost := lab.AddHost("dhcp"), lab.AddHost("boot"), lab.AddHost("bmc")
	dnsmasq := dhcp.StartDnsmasq(netlab.DnsmasqConfig{})
	secrets := t.TempDir()
	cred := writeCredentials(t, secrets, "bmc.json", bmcUser, bmcPassword)
	app := startAppliance(t, boot, applianceConfig{
		// Nothing serves the ramdisk: the test ends at the script.
		KernelURL: "http://" + dhcp.Addr().String() + ":8081/vmlinuz", InitrdURL: "http://" + dhcp.Addr().String() + ":8081/initrd",
		Extra: relayConfig(secrets, []string{bmcHost.Addr().String() + "/32"}, nil),
	})
	chassis := &vmChassis{lab: lab, mac: netlab.RandomMAC()}
	chassis.reportOnFailure(t, app)
	startIPMISim(t, bmcHost, chassis, bmcPassword)
	ctx, cancel := context.WithTimeout(lab.Context(), 3*time.Minute)
	defer cancel()
	mac := chassis.mac.String()
	ipmi := func(op string, value ...string) bmcCall {
		return app.bmc(ctx, append([]string{"--driver", "ipmi", "--address", bmcHost.Addr().String(), "--credentials-ref", cred, op}, value...)...)
	}

	ipmi("management.setBootDevice", "pxe").mustResult(t, `{"device":"pxe","efi":false,"persistent":false}`)
	if got := chassis.bootDevices(); !slices.Contains(got, "pxe") {
		t.Errorf("chassis boot devices after setBootDevice pxe: %q, want pxe among them", got)
	}
	ipmi("power.getPower").mustResult(t, `{"power":"off"}`)

	// Entry present: power on → the VM's firmware gets siteboot's script.
	app.mustCLI(ctx, "entry", "add", "--node-id", "node-bmc", "--mac", mac, "--ttl", "1h")
	on := time.Now()
	ipmi("power.setPower", "on").mustResult(t, `{"requested":"on"}`)
	vm := chassis.waitVM(ctx, t, 1)
	if err := waitUntil(ctx, vm, func() bool { return len(scriptsSince(app, mac, on)) > 0 }); err != nil {
		t.Fatalf("VM %s powered on by the BMC: no /ipxe script served: %v\nsiteboot:\n%s", mac, err, app.logDigest(30))
	}
	script := scriptsSince(app, mac, on)[0]
	t.Logf("power on → /ipxe script (%s, %s/%s) in %v", script.str("result"), script.str("buildarch"), script.str("platform"), script.at().Sub(on).Round(100*time.Millisecond))
	if got := script.str("result"); got != "ramdisk" {
		t.Errorf("/ipxe for %s: result %q, want ramdisk", mac, got)
	}
	// As a person reads it, too.
	if c := app.run(ctx, "bmc", "--driver", "ipmi", "--address", bmcHost.Addr().String(), "--credentials-ref", cred, "power.getPower"); c.Exit != 0 || c.Stdout != "power: on\n" {
		t.Errorf("power.getPower of the running VM: want exit 0 and \"power: on\"\n%s", c)
	}
	ipmi("power.setPower", "off").mustResult(t, `{"requested":"off"}`)
	chassis.waitOff(ctx, t, vm)
	ipmi("power.getPower").mustResult(t, `{"power":"off"}`)

	// Entry removed: power on → not answered, listed as discovered.
	app.mustCLI(ctx, "entry", "rm", "--node-id", "node-bmc")
	acks := countLines(dnsmasq.LogFile, "DHCPACK(", mac)
	again := time.Now()
	ipmi("power.setPower", "on").mustResult(t, `{"requested":"on"}`)
	vm = chassis.waitVM(ctx, t, 2)
	checkUnanswered(ctx, t, app, vm, mac, again, func() bool { return countLines(dnsmasq.LogFile, "DHCPACK(", mac) > acks })
	ipmi("power.setPower", "off").mustResult(t, `{"requested":"off"}`)
	chassis.waitOff(ctx, t, vm)
	checkBMCMetrics(ctx, t, app, map[string]float64{
		"operation=management.setBootDevice,code=ok": 1,
		"operation=power.getPower,code=ok":           3,
		"operation=power.setPower,code=ok":           4,
	})
}

// unknownGrace is how long a machine without an entry is still watched
// after the site's DHCP server acknowledged it: iPXE waits about 2 s for
// proxyDHCP offers before it requests, so by then it has given up.
const unknownGrace = 5 * time.Second

// checkUnanswered waits (at most unknownWatch) until mac is listed by
// `discovered ls` with a first sighting after since and acked() holds,
// then unknownGrace more, and checks that siteboot offered it nothing and
// served it no script.
func checkUnanswered(ctx context.Context, t *testing.T, app *appliance, vm *netlab.VM, mac string, since time.Time, acked func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, unknownWatch)
	defer cancel()
	var listedAt, ackedAt time.Time
	err := waitUntil(ctx, vm, func() bool {
		if listedAt.IsZero() {
			if m := app.discovered(ctx, mac); m != nil && !m.GetFirstSeen().AsTime().Before(since.Truncate(time.Second)) {
				listedAt = time.Now()
			}
		}
		if ackedAt.IsZero() && acked() {
			ackedAt = time.Now()
		}
		return !listedAt.IsZero() && !ackedAt.IsZero() && time.Since(ackedAt) >= unknownGrace
	})
	if err != nil {
		t.Fatalf("VM %s without an entry: listed %v, acked by dnsmasq %v: %v\nsiteboot:\n%s", mac, !listedAt.IsZero(), !ackedAt.IsZero(), err, app.logDigest(30))
	}
	m := app.discovered(ctx, mac)
	t.Logf("power on without an entry → discovered ls after %v: arch %s, count %d", listedAt.Sub(since).Round(100*time.Millisecond), m.GetArch(), m.GetCount())
	if m.GetArch() != "bios" {
		t.Errorf("discovered %s: arch %q, want bios", mac, m.GetArch())
	}
	var answered []string
	unknown := 0
	for _, l := range app.logs() {
		if l.at().Before(since) {
			continue
		}
		switch {
		case l.str("msg") == msgDHCP && l.str("mac") == mac && l.str("decision") == "unknown-mac":
			unknown++
		case l.str("msg") == msgDHCP && l.str("mac") == mac && !strings.HasPrefix(l.str("decision"), "ignored"):
			answered = append(answered, l.compact())
		case (l.str("msg") == msgScript || l.str("msg") == msgBootstrap) && l.str("mac") == mac:
			answered = append(answered, l.compact())
		}
	}
	if len(answered) > 0 || unknown == 0 {
		t.Errorf("siteboot after the entry was removed: %d unknown-mac decisions (want ≥ 1), answers (want none):\n%s", unknown, strings.Join(answered, "\n"))
	}
}

// scriptsSince returns the /ipxe script lines logged for mac at or after t.
func scriptsSince(app *appliance, mac string, t time.Time) []logLine {
	var out []logLine
	for _, l := range filterLog(app.logs(), msgScript, map[string]string{"mac": mac}) {
		if !l.at().Before(t) {
			out = append(out, l)
		}
	}
	return out
}

// countLines counts the lines of path holding every one of subs.
func countLines(path string, subs ...string) int {
	data, _ := os.ReadFile(path)
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

// checkBMCMetrics compares siteboot_bmc_operations_total{driver=ipmi} by
// operation and code with want.
func checkBMCMetrics(ctx context.Context, t *testing.T, app *appliance, want map[string]float64) {
	t.Helper()
	m := app.mustScrape(ctx)
	got := map[string]float64{}
	for k := range want {
		got[k] = m.value("siteboot_bmc_operations_total", append([]string{"driver=ipmi"}, strings.Split(k, ",")...)...)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("siteboot_bmc_operations_total{driver=ipmi} (-want +got):\n%s\nall: %v", diff, m.nonZero("siteboot_bmc_operations_total"))
	}
}

// vmChassis is the machine behind the simulated BMC: power on starts a
// SeaBIOS VM with a fixed MAC on the lab's bridge, power off stops it.
type vmChassis struct {
	lab *netlab.Lab
	mac net.HardwareAddr

	mu   sync.Mutex
	vms  []*netlab.VM
	boot []string
}

func (c *vmChassis) Power() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running() != nil, nil
}

// running is the VM that is powered on, or nil.
func (c *vmChassis) running() *netlab.VM {
	if len(c.vms) == 0 {
		return nil
	}
	vm := c.vms[len(c.vms)-1]
	select {
	case <-vm.Done():
		return nil
	default:
		return vm
	}
}

func (c *vmChassis) SetPower(on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.setPower(on)
}

func (c *vmChassis) setPower(on bool) error {
	vm := c.running()
	switch {
	case !on && vm != nil:
		vm.Stop()
	case on && vm == nil:
		vm, err := c.lab.LaunchVM(netlab.VMConfig{Label: fmt.Sprintf("machine%d", len(c.vms)+1), Firmware: netlab.BIOS, MAC: c.mac})
		if err != nil {
			return err
		}
		c.vms = append(c.vms, vm)
	}
	return nil
}

// Reset is a power cycle: the VM is stopped and a fresh one started.
func (c *vmChassis) Reset() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.setPower(false); err != nil {
		return err
	}
	return c.setPower(true)
}

func (c *vmChassis) SetBootDevice(dev string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.boot = append(c.boot, dev)
	return nil
}

func (c *vmChassis) bootDevices() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.boot)
}

// waitVM waits until the chassis has started its n-th VM and returns it.
func (c *vmChassis) waitVM(ctx context.Context, t *testing.T, n int) *netlab.VM {
	t.Helper()
	for {
		c.mu.Lock()
		if len(c.vms) >= n {
			vm := c.vms[n-1]
			c.mu.Unlock()
			return vm
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			t.Fatalf("the chassis never started VM %d: %v", n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitOff waits until vm has exited after a power off.
func (c *vmChassis) waitOff(ctx context.Context, t *testing.T, vm *netlab.VM) {
	t.Helper()
	select {
	case <-vm.Done():
	case <-ctx.Done():
		t.Fatalf("VM %s still running after power off: %v", c.mac, ctx.Err())
	}
}

// reportOnFailure leaves a screendump of the last VM and siteboot's last
// decisions in the log of a failed test.
func (c *vmChassis) reportOnFailure(t *testing.T, app *appliance) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		c.mu.Lock()
		vm := c.running()
		c.mu.Unlock()
		if vm != nil {
			shot := filepath.Join(os.TempDir(), fmt.Sprintf("sbt-e2e-%s-bmc-%d.ppm", c.lab.ID(), time.Now().Unix()))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := vm.Screendump(ctx, shot); err == nil {
				t.Logf("VM %s: screen saved to %s", c.mac, shot)
			}
		}
		t.Logf("siteboot's last decisions:\n%s", app.logDigest(60))
	})
}

// startIPMISim runs ipmi_sim on h (UDP 623 of its address) with chassis
// behind it and the account bmcUser/password.
func startIPMISim(t *testing.T, h *netlab.Host, chassis ipmisim.Chassis, password string) *ipmisim.Sim {
	t.Helper()
	ctx, cancel := context.WithTimeout(h.Lab().Context(), 30*time.Second)
	defer cancel()
	sim, err := ipmisim.Start(ctx, ipmisim.Config{
		Dir: t.TempDir(), Addr: h.Addr(), Port: 623, User: bmcUser, Password: password,
		Chassis: chassis, Command: h.Command,
	})
	if err != nil {
		t.Fatalf("ipmi_sim on %s: %v", h.Name(), err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

// writeCredentials writes a BMC credentials secret into dir and returns
// its file:// reference.
func writeCredentials(t *testing.T, dir, name, user, password string) string {
	t.Helper()
	data, err := json.Marshal(map[string]string{"username": user, "password": password})
	if err != nil {
		t.Fatal(err)
	}
	return writeSecret(t, dir, name, data)
}

// writeSecret writes a secret file into dir and returns its reference.
func writeSecret(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return "file://" + path
}

// relayConfig is the configuration the relays need: secrets.dir, the BMC
// networks and the networks where the proxy may use plain http.
func relayConfig(secretsDir string, bmcNetworks, provisioning []string) []string {
	list := func(xs []string) string { return "[" + strings.Join(xs, ", ") + "]" }
	return []string{
		"secrets:",
		"  dir: " + secretsDir,
		"bmc:",
		"  networks: " + list(bmcNetworks),
		"  timeout: 30s",
		"httpproxy:",
		"  provisioning_networks: " + list(provisioning),
	}
}
