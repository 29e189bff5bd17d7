package ipmisim

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestCommandRunsInNetworkNamespace runs ipmi_sim (and Start's probe) in
// a network namespace of its own through Config.Command, and drives it
// with ipmitool in that namespace: the chassis calls still reach the Go
// Chassis over the Unix socket.
func TestCommandRunsInNetworkNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root for ip netns")
	}
	ns := fmt.Sprintf("sb-ipmisim-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v %s", err, out)
	}
	inNS := func(name string, args ...string) *exec.Cmd {
		return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	}
	var used []string
	record := func(name string, args ...string) *exec.Cmd {
		used = append(used, name)
		return inNS(name, args...)
	}
	ch := &MemChassis{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{Dir: t.TempDir(), Addr: netip.MustParseAddr("127.0.0.1"), Port: 623,
		User: testUser, Password: testPassword, Chassis: ch, Command: record})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer s.Close()
	if len(used) < 2 || used[0] != "ipmi_sim" || used[1] != "ipmitool" {
		t.Fatalf("Command was used for %q, want ipmi_sim then ipmitool", used)
	}
	cmd := inNS("ipmitool", "-I", "lanplus", "-C", "3", "-N", "5", "-R", "1", "-H", "127.0.0.1", "-p", "623",
		"-U", testUser, "-E", "power", "on")
	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+testPassword)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "Up/On") {
		t.Fatalf("ipmitool in the namespace: %v %s", err, out)
	}
	if on, _ := ch.Power(); !on {
		t.Fatalf("power on from the namespace did not reach the chassis: %q", ch.Calls())
	}
	// Nothing listens on port 623 of this namespace's loopback.
	probe := exec.Command("ipmitool", "-I", "lanplus", "-C", "3", "-N", "1", "-R", "1", "-H", "127.0.0.1", "-p", "623",
		"-U", testUser, "-E", "power", "status")
	probe.Env = append(os.Environ(), "IPMI_PASSWORD="+testPassword)
	if out, err := probe.CombinedOutput(); err == nil {
		t.Errorf("ipmi_sim answered outside its namespace: %s", out)
	}
}
