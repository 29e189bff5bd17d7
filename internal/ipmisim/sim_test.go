package ipmisim

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	ChassisMain()
	goleak.VerifyTestMain(m)
}

const (
	testUser     = "admin"
	testPassword = "pa55-w0rd"
)

func startSim(t *testing.T, ch Chassis) *Sim {
	t.Helper()
	if _, err := exec.LookPath("ipmi_sim"); err != nil {
		t.Fatalf("ipmi_sim is required (Debian package openipmi): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{Dir: t.TempDir(), User: testUser, Password: testPassword, Chassis: ch})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ipmitool runs the real ipmitool against s.
func ipmitool(t *testing.T, s *Sim, password string, args ...string) (string, error) {
	t.Helper()
	base := []string{"-I", "lanplus", "-C", "3", "-N", "5", "-R", "1",
		"-H", s.Addr().Addr().String(), "-p", strconv.Itoa(int(s.Addr().Port())), "-U", testUser, "-E"}
	cmd := exec.Command("ipmitool", append(base, args...)...)
	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+password)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustIpmitool(t *testing.T, s *Sim, args ...string) string {
	t.Helper()
	out, err := ipmitool(t, s, testPassword, args...)
	if err != nil {
		t.Fatalf("ipmitool %v: %v\n%s", args, err, out)
	}
	return out
}

func TestPowerReachesChassis(t *testing.T) {
	ch := &MemChassis{}
	s := startSim(t, ch)

	if out := mustIpmitool(t, s, "power", "status"); !strings.Contains(out, "Chassis Power is off") {
		t.Fatalf("power status before on = %q", out)
	}
	mustIpmitool(t, s, "power", "on")
	if on, _ := ch.Power(); !on {
		t.Fatalf("power on did not reach the chassis; calls %q", ch.Calls())
	}
	if out := mustIpmitool(t, s, "power", "status"); !strings.Contains(out, "Chassis Power is on") {
		t.Fatalf("power status after on = %q", out)
	}
	mustIpmitool(t, s, "power", "reset")
	mustIpmitool(t, s, "power", "off")
	if on, _ := ch.Power(); on {
		t.Fatalf("power off did not reach the chassis; calls %q", ch.Calls())
	}
	want := []string{"power true", "reset", "power false"}
	if diff := cmp.Diff(want, ch.Calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestPowerCycleIsOffThenOn(t *testing.T) {
	ch := &MemChassis{}
	s := startSim(t, ch)
	mustIpmitool(t, s, "power", "on")
	mustIpmitool(t, s, "power", "cycle")
	deadline := time.Now().Add(10 * time.Second)
	want := []string{"power true", "power false", "power true"}
	for !slices.Equal(ch.Calls(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("calls after cycle = %q, want %q", ch.Calls(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestBootDeviceReachesChassis(t *testing.T) {
	ch := &MemChassis{}
	s := startSim(t, ch)
	for _, tc := range []struct{ ipmitool, chassis string }{
		{"pxe", "pxe"}, {"disk", "default"}, {"cdrom", "cdrom"}, {"bios", "bios"},
	} {
		mustIpmitool(t, s, "chassis", "bootdev", tc.ipmitool)
		if got := ch.BootDevice(); got != tc.chassis {
			t.Errorf("bootdev %s: chassis has %q, want %q", tc.ipmitool, got, tc.chassis)
		}
		if got := s.BootDevice(); got != tc.chassis {
			t.Errorf("bootdev %s: BMC holds %q, want %q", tc.ipmitool, got, tc.chassis)
		}
	}
}

type failingChassis struct{ MemChassis }

func (*failingChassis) SetPower(bool) error { return errors.New("power supply on fire") }

func TestChassisErrorFailsCommand(t *testing.T) {
	s := startSim(t, &failingChassis{})
	out, err := ipmitool(t, s, testPassword, "power", "on")
	if err == nil {
		t.Fatalf("power on with a failing chassis succeeded: %s", out)
	}
}

func TestWrongPasswordRefused(t *testing.T) {
	ch := &MemChassis{}
	s := startSim(t, ch)
	out, err := ipmitool(t, s, "not-the-password", "power", "on")
	if err == nil {
		t.Fatalf("wrong password accepted: %s", out)
	}
	if len(ch.Calls()) != 0 {
		t.Errorf("chassis got %q with a wrong password", ch.Calls())
	}
}

func TestCloseReapsProcess(t *testing.T) {
	s := startSim(t, nil)
	pid := s.cmd.Process.Pid
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("ipmi_sim pid %d still exists after Close (kill 0: %v)", pid, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestConfigCheck(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no dir":         {User: "a", Password: "b"},
		"no user":        {Dir: "/tmp", Password: "b"},
		"quote password": {Dir: "/tmp", User: "a", Password: `b"c`},
		"long password":  {Dir: "/tmp", User: "a", Password: strings.Repeat("x", 17)},
		"port":           {Dir: "/tmp", User: "a", Password: "b", Port: 70000},
	} {
		if _, err := Start(context.Background(), cfg); err == nil {
			t.Errorf("%s: Start accepted %+v", name, cfg)
		}
	}
}
