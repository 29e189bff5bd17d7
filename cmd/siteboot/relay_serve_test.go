package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/ipmisim"
	"github.com/siteboot/siteboot/internal/redfishsim"
)

// The BMC password of these tests: it must never appear in what the CLI
// prints.
const relayTestPassword = "Pw-9f2e-x7Qa"

// relayServe is a `siteboot serve` process with bmc.networks and a
// secrets.dir holding the BMC credentials.
type relayServe struct {
	sock, secrets string
	outputs       []string // every stdout and stderr the CLI printed
}

func startRelayServe(t *testing.T, networks string) *relayServe {
	t.Helper()
	r := startRelayServeWith(t, networks, "")
	waitSocket(t, r.sock)
	return r
}

// startRelayServeWith starts the process with more YAML and does not wait
// for it (the CLI waits until it is ready).
func startRelayServeWith(t *testing.T, networks, more string) *relayServe {
	t.Helper()
	base := t.TempDir()
	r := &relayServe{sock: filepath.Join(base, "s.sock"), secrets: filepath.Join(base, "secrets")}
	if err := os.Mkdir(r.secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, base, "siteboot.yaml", "site_id: relay-test\nsecrets:\n  dir: "+r.secrets+"\nbmc:\n  networks: "+networks+"\n"+more)
	serveProcess(t, "--config", cfg, "--data-dir", filepath.Join(base, "data"), "--admin-socket", r.sock)
	return r
}

// secret writes a secret file and returns its ref.
func (r *relayServe) secret(t *testing.T, name, value string) string {
	t.Helper()
	return "file://" + writeFile(t, r.secrets, name, value)
}

// run runs the siteboot binary against the appliance and returns stdout,
// stderr and the exit status.
func (r *relayServe) run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	out, errOut, err := runCLI(t, nil, r.sock, args...)
	r.outputs = append(r.outputs, out, errOut)
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return out, errOut, ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out, errOut, 0
}

// refused asserts a relay refusal: exit status 1, nothing on stdout, and
// exactly one stderr line starting with prefix and containing each of
// wants.
func (r *relayServe) refused(t *testing.T, prefix string, wants []string, args ...string) {
	t.Helper()
	out, errOut, code := r.run(t, args...)
	line := strings.TrimSuffix(errOut, "\n")
	if code != 1 || out != "" || !strings.HasPrefix(line, prefix) || strings.Contains(line, "\n") {
		t.Fatalf("siteboot %s: exit %d, stdout %q, stderr %q; want exit 1, no stdout, one line starting %q",
			strings.Join(args, " "), code, out, errOut, prefix)
	}
	for _, w := range wants {
		if !strings.Contains(line, w) {
			t.Errorf("stderr %q lacks %q", line, w)
		}
	}
}

// noSecret asserts that the password never appeared in the CLI's output.
func (r *relayServe) noSecret(t *testing.T) {
	t.Helper()
	for _, o := range r.outputs {
		if strings.Contains(o, relayTestPassword) {
			t.Fatalf("the BMC password appeared in the CLI's output: %q", o)
		}
	}
}

// countUDP listens on addr and counts the datagrams it receives.
func countUDP(t *testing.T, addr string) (string, *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	var n atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return pc.LocalAddr().String(), &n
}

// countTCP listens on addr and counts the connections it accepts.
func countTCP(t *testing.T, addr string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().String(), &n
}

// noPackets asserts that none of the counters saw anything, after giving
// a stray packet time to arrive.
func noPackets(t *testing.T, counters ...*atomic.Int64) {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	for i, c := range counters {
		if n := c.Load(); n != 0 {
			t.Errorf("listener %d got %d packets or connections from a refused target; want none", i, n)
		}
	}
}

// With the default, empty bmc.networks every BMC operation is refused.
func TestBmcRefusedWithoutNetworks(t *testing.T) {
	r := startRelayServe(t, "[]")
	udp, packets := countUDP(t, "127.0.0.1:0")
	r.refused(t, "bmc: forbidden-target: ", []string{"bmc.networks is empty"},
		"bmc", "--driver", "ipmi", "--address", udp, "--credentials-ref", r.secret(t, "bmc.json", `{"username":"admin","password":"`+relayTestPassword+`"}`), "power.getPower")
	noPackets(t, packets)
	r.noSecret(t)
}

// The BMC relay through `siteboot serve` and the CLI: a BMC outside
// bmc.networks is refused without a packet; ipmi_sim inside it is powered
// on and off and its boot device set.
func TestBmcThroughServe(t *testing.T) {
	if _, err := exec.LookPath("ipmi_sim"); err != nil {
		t.Fatalf("ipmi_sim is required (Debian package openipmi): %v", err)
	}
	r := startRelayServe(t, "[127.0.0.1/32]")
	creds := r.secret(t, "bmc.json", `{"username":"admin","password":"`+relayTestPassword+`"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	chassis := &ipmisim.MemChassis{}
	sim, err := ipmisim.Start(ctx, ipmisim.Config{Dir: t.TempDir(), User: "admin", Password: relayTestPassword, Chassis: chassis})
	if err != nil {
		t.Fatalf("ipmisim: %v", err)
	}
	t.Cleanup(func() { sim.Close() })
	ipmi := func(args ...string) []string {
		return append([]string{"bmc", "--driver", "ipmi", "--address", sim.Addr().String(), "--credentials-ref", creds,
			"--driver-options", `{"cipherSuite": 3}`}, args...)
	}
	ok := func(t *testing.T, args []string, want string) {
		t.Helper()
		out, errOut, code := r.run(t, args...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("siteboot %s: exit %d, stdout %q, stderr %q; want %q", strings.Join(args, " "), code, out, errOut, want)
		}
	}
	power := func(t *testing.T) bool {
		t.Helper()
		on, err := chassis.Power()
		if err != nil {
			t.Fatal(err)
		}
		return on
	}

	t.Run("outside bmc.networks", func(t *testing.T) {
		udp, packets := countUDP(t, "127.0.0.2:0")
		tcp, conns := countTCP(t, "127.0.0.2:0")
		r.refused(t, "bmc: forbidden-target: ", []string{"127.0.0.2", "bmc.networks"},
			"bmc", "--driver", "ipmi", "--address", udp, "--credentials-ref", creds, "power.setPower", "on")
		r.refused(t, "bmc: forbidden-target: ", []string{"127.0.0.2", "bmc.networks"},
			"bmc", "--driver", "redfish", "--address", "https://"+tcp, "--credentials-ref", creds, "power.getPower")
		noPackets(t, packets, conns)
		if power(t) {
			t.Fatal("a refused operation powered the machine on")
		}
	})
	t.Run("power", func(t *testing.T) {
		ok(t, ipmi("power.getPower"), "power: off\n")
		ok(t, ipmi("power.setPower", "on"), "on")
		if !power(t) {
			t.Fatalf("power.setPower on: the machine is off (chassis calls %v)", chassis.Calls())
		}
		out, errOut, code := r.run(t, ipmi("power.getPower", "-o", "json")...)
		var res struct {
			OK         bool   `json:"ok"`
			ResultJSON string `json:"resultJson"`
		}
		if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || !res.OK || res.ResultJSON != `{"power":"on"}` {
			t.Fatalf("power.getPower -o json: exit %d, %v, %+v (stdout %q, stderr %q)", code, err, res, out, errOut)
		}
		ok(t, ipmi("power.setPower", "off"), "off")
		if power(t) {
			t.Fatalf("power.setPower off: the machine is on (chassis calls %v)", chassis.Calls())
		}
		ok(t, ipmi("power.getPower"), "power: off\n")
	})
	t.Run("boot device", func(t *testing.T) {
		ok(t, ipmi("management.setBootDevice", "pxe"), "device: pxe")
		if got := chassis.BootDevice(); got != "pxe" {
			t.Fatalf("boot device %q after management.setBootDevice pxe; want pxe (chassis calls %v)", got, chassis.Calls())
		}
	})
	t.Run("failures", func(t *testing.T) {
		wrong := r.secret(t, "wrong.json", `{"username":"admin","password":"not-`+relayTestPassword[:8]+`"}`)
		r.refused(t, "bmc: auth-failed: ", nil,
			"bmc", "--driver", "ipmi", "--address", sim.Addr().String(), "--credentials-ref", wrong, "--driver-options", `{"cipherSuite": 3}`, "power.getPower")
		r.refused(t, "bmc: credentials-unavailable: ", []string{"file:///etc/shadow"},
			"bmc", "--driver", "ipmi", "--address", sim.Addr().String(), "--credentials-ref", "file:///etc/shadow", "power.getPower")
		r.refused(t, "bmc: invalid-args: ", []string{"state"}, ipmi("power.setPower", "sideways")...)
		r.refused(t, "bmc: unsupported: ", nil, ipmi("power.dance")...)
		if power(t) {
			t.Fatal("a failed operation powered the machine on")
		}
	})
	r.noSecret(t)
}

// httpProxy through `siteboot serve`: a node the spec does not list, a
// host the node does not list, and hosts it lists that DefaultDeny (a
// loopback address) or DenyLocal (this machine's own address) refuse are
// all forbidden-target, and nothing reaches their listeners.
func TestProxyThroughServe(t *testing.T) {
	r := startRelayServe(t, "[127.0.0.1/32]")
	loop, loopConns := countTCP(t, "127.0.0.1:0")
	other, otherConns := countTCP(t, "127.0.0.2:0")
	_, loopPort, _ := net.SplitHostPort(loop)
	spec := "proxyTargets:\n  - nodeId: loop\n    addresses: [127.0.0.1, localhost]\n"
	local := localAddress(t)
	if local != "" {
		spec += "  - nodeId: self\n    addresses: [" + local + "]\n"
	}
	if _, errOut, code := r.run(t, "site", "apply", writeFile(t, t.TempDir(), "site.yaml", spec)); code != 0 {
		t.Fatalf("site apply: exit %d: %s", code, errOut)
	}
	cases := []struct {
		name  string
		args  []string
		wants []string
	}{
		{"node not in the spec", []string{"--target-node", "nobody", "--url", "http://" + loop + "/"}, []string{"nobody"}},
		{"host the node does not list", []string{"--target-node", "loop", "--url", "http://" + other + "/"}, []string{"127.0.0.2"}},
		{"listed loopback, http", []string{"--target-node", "loop", "--url", "http://" + loop + "/"}, []string{"127.0.0.1"}},
		{"listed loopback, https", []string{"--target-node", "loop", "--url", "https://" + loop + "/"}, []string{"127.0.0.1"}},
		{"listed loopback, by name", []string{"--target-node", "loop", "--url", "http://localhost:" + loopPort + "/"}, nil},
		{"listed loopback, json output", []string{"--target-node", "loop", "--url", "https://" + loop + "/", "-o", "json"}, nil},
		{"listed loopback, secret header", []string{"--target-node", "loop", "--url", "https://" + loop + "/",
			"--secret-header", "Authorization:" + r.secret(t, "bearer", "Bearer "+relayTestPassword), "--method", "POST", "--body", "x"}, nil},
	}
	if local != "" {
		// No listener: were DenyLocal not wired, the dial would be refused
		// by this machine's own kernel and the code unreachable.
		cases = append(cases, struct {
			name  string
			args  []string
			wants []string
		}{"listed own address", []string{"--target-node", "self", "--url", "https://" + net.JoinHostPort(local, "9") + "/"}, []string{local}})
	} else {
		t.Log("no non-loopback IPv4 address here: DenyLocal is not exercised")
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r.refused(t, "proxy: forbidden-target: ", tc.wants, append([]string{"proxy"}, tc.args...)...)
		})
	}
	noPackets(t, loopConns, otherConns)
	r.noSecret(t)
}

// localAddress is a non-loopback IPv4 address of this machine, or "".
func localAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// The relays are not boot answers: an appliance that does not hold the
// boot lease (lease.mode external, nothing pushed) still runs them.
func TestRelaysWithoutTheBootLease(t *testing.T) {
	r := startRelayServeWith(t, "[127.0.0.1/32]", "lease:\n  mode: external\n")
	udp, packets := countUDP(t, "127.0.0.2:0")
	r.refused(t, "bmc: forbidden-target: ", []string{"127.0.0.2", "bmc.networks"},
		"bmc", "--driver", "ipmi", "--address", udp, "--credentials-ref", r.secret(t, "bmc.json", `{"username":"admin","password":"x"}`), "power.getPower")
	r.refused(t, "proxy: forbidden-target: ", []string{"nobody"}, "proxy", "--target-node", "nobody", "--url", "https://10.0.0.51/")
	noPackets(t, packets)
	out, errOut, code := r.run(t, "lease", "status", "-o", "json")
	var ls leaseJSON
	if err := json.Unmarshal([]byte(out), &ls); code != 0 || err != nil || ls.Active || ls.Mode != "external" {
		t.Fatalf("lease status: exit %d, %v, %+v (%s); want external and not active", code, err, ls, errOut)
	}
}

// Redfish through the CLI, pinned: power on, a boot device, virtual media
// in and out; a wrong pin is pin-mismatch and changes nothing.
func TestRedfishThroughServe(t *testing.T) {
	r := startRelayServe(t, "[127.0.0.1/32]")
	sim, err := redfishsim.Start(redfishsim.Config{User: "admin", Password: relayTestPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	creds := r.secret(t, "redfish.json", `{"username":"admin","password":"`+relayTestPassword+`"}`)
	pin := hex.EncodeToString(sim.SPKISHA256())
	redfish := func(pin string, args ...string) []string {
		return append([]string{"bmc", "--driver", "redfish", "--address", "https://" + sim.Addr().String(), "--credentials-ref", creds,
			"--spki-sha256", pin}, args...)
	}
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"power.setPower", "on"}, "requested: on\n"},
		{[]string{"power.getPower"}, "power: on\n"},
		{[]string{"management.setBootDevice", "pxe", "--efi"}, "device: pxe\nefi: true\npersistent: false\n"},
		{[]string{"virtual-media.insert", "https://10.0.0.2:8080/cache/abc"}, "inserted: true\nkind: CD\n"},
	} {
		out, errOut, code := r.run(t, redfish(pin, step.args...)...)
		if code != 0 || out != step.want {
			t.Fatalf("bmc %s: exit %d, stdout %q, stderr %q; want %q", strings.Join(step.args, " "), code, out, errOut, step.want)
		}
	}
	st := sim.State()
	if !st.PowerOn || !strings.EqualFold(st.BootTarget, "pxe") || !st.MediaInserted || st.MediaImage != "https://10.0.0.2:8080/cache/abc" {
		t.Fatalf("redfish state after the operations: %+v", st)
	}
	wrong := strings.Repeat("00", 32)
	r.refused(t, "bmc: pin-mismatch: ", nil, redfish(wrong, "virtual-media.eject")...)
	if !sim.State().MediaInserted {
		t.Fatal("a refused pin ejected the medium")
	}
	if out, errOut, code := r.run(t, redfish(pin, "virtual-media.eject")...); code != 0 || !strings.Contains(out, "ejected: true") || sim.State().MediaInserted {
		t.Fatalf("virtual-media.eject: exit %d, stdout %q, stderr %q, state %+v", code, out, errOut, sim.State())
	}
	r.noSecret(t)
}

// In the running appliance httpProxy's deny list holds bmc.networks: a
// node address inside it is refused as a denied range, before DenyLocal
// (which would refuse this machine's own address too, naming it so).
func TestProxyNeverReachesABMCNetwork(t *testing.T) {
	local := localAddress(t)
	if local == "" {
		t.Skip("no non-loopback IPv4 address here to put into bmc.networks")
	}
	r := startRelayServe(t, "["+local+"/32]")
	spec := "proxyTargets:\n  - nodeId: bmc-node\n    addresses: [" + local + "]\n"
	if _, errOut, code := r.run(t, "site", "apply", writeFile(t, t.TempDir(), "site.yaml", spec)); code != 0 {
		t.Fatalf("site apply: exit %d: %s", code, errOut)
	}
	r.refused(t, "proxy: forbidden-target: ", []string{local + " is in the denied range " + local + "/32"},
		"proxy", "--target-node", "bmc-node", "--url", "https://"+net.JoinHostPort(local, "9")+"/")
}
