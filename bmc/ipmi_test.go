package bmc

import (
	"context"
	"slices"
	"testing"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/ipmisim"
	"github.com/siteboot/siteboot/internal/relayerr"
)

func startIPMI(t *testing.T) (*ipmisim.Sim, *ipmisim.MemChassis) {
	t.Helper()
	requireTool(t, "ipmi_sim")
	requireTool(t, "ipmitool")
	ch := &ipmisim.MemChassis{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := ipmisim.Start(ctx, ipmisim.Config{Dir: t.TempDir(), User: ipmiUser, Password: ipmiPassword, Chassis: ch})
	if err != nil {
		t.Fatalf("ipmisim.Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, ch
}

func ipmiReq(s *ipmisim.Sim, ref, op, args string) *sitev1.BmcOperationRequest {
	return &sitev1.BmcOperationRequest{Driver: "ipmi", Address: s.Addr().String(), CredentialsRef: ref,
		Operation: op, ArgsJson: args, DriverOptionsJson: `{"cipherSuite":3}`}
}

func TestIPMIPower(t *testing.T) {
	s, ch := startIPMI(t)
	tr := newTestRelay(t, nil)

	wantOK(t, tr.do(t, ipmiReq(s, "env://IPMI", "power.getPower", "")), `{"power":"off"}`)
	wantOK(t, tr.do(t, ipmiReq(s, "env://IPMI", "power.setPower", `{"state":"on"}`)), `{"requested":"on"}`)
	if on, _ := ch.Power(); !on {
		t.Fatalf("power on did not reach the machine: %q", ch.Calls())
	}
	wantOK(t, tr.do(t, ipmiReq(s, "env://IPMI", "power.getPower", "{}")), `{"power":"on"}`)
	wantOK(t, tr.do(t, ipmiReq(s, "env://IPMI", "power.setPower", `{"state":"cycle"}`)), `{"requested":"cycle"}`)
	waitCalls(t, ch, []string{"power true", "power false", "power true"})
	wantOK(t, tr.do(t, ipmiReq(s, "env://IPMI", "power.setPower", `{"state":"off"}`)), `{"requested":"off"}`)
	if on, _ := ch.Power(); on {
		t.Fatalf("power off did not reach the machine: %q", ch.Calls())
	}
	wantOK(t, tr.do(t, ipmiReq(s, "env://IPMI", "inspect.inspect", "")), `{"power":"off"}`)
}

func waitCalls(t *testing.T, ch *ipmisim.MemChassis, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(ch.Calls(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("machine calls = %q, want %q", ch.Calls(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestIPMIBootDevice(t *testing.T) {
	s, ch := startIPMI(t)
	tr := newTestRelay(t, nil)
	wantOK(t, tr.do(t, ipmiReq(s, "env://IPMI", "management.setBootDevice", `{"device":"pxe"}`)),
		`{"device":"pxe","efi":false,"persistent":false}`)
	if got := ch.BootDevice(); got != "pxe" {
		t.Fatalf("boot device on the machine = %q, want pxe", got)
	}
	wantOK(t, tr.do(t, ipmiReq(s, "env://IPMI", "management.setBootDevice", `{"device":"disk","persistent":true,"efi":true}`)),
		`{"device":"disk","efi":true,"persistent":true}`)
	if got := ch.BootDevice(); got != "default" {
		t.Fatalf("boot device on the machine = %q, want default (ipmi_sim's word for disk)", got)
	}
}

func TestIPMIWrongPassword(t *testing.T) {
	s, ch := startIPMI(t)
	tr := newTestRelay(t, nil)
	res := tr.do(t, ipmiReq(s, "env://IPMI_BAD", "power.setPower", `{"state":"on"}`))
	wantCode(t, res, relayerr.AuthFailed, s.Addr().String())
	if len(ch.Calls()) != 0 {
		t.Errorf("machine got %q with a wrong password", ch.Calls())
	}
}

func TestIPMIUnreachableIsTimeoutOrUnreachable(t *testing.T) {
	requireTool(t, "ipmitool")
	tr := newTestRelay(t, func(c *Config) { c.Timeout = 2 * time.Second })
	// A UDP port on loopback nobody answers: ipmitool waits; the deadline
	// kills it.
	start := time.Now()
	res := tr.do(t, &sitev1.BmcOperationRequest{Driver: "ipmi", Address: "127.0.0.1:9", CredentialsRef: "env://IPMI",
		Operation: "power.getPower"})
	wantCode(t, res, relayerr.Timeout, "deadline")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("operation took %s with a 2s deadline", d)
	}
}
