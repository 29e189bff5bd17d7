package bmc

import (
	"slices"
	"strings"
	"testing"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/redfishsim"
	"github.com/siteboot/siteboot/internal/relayerr"
)

func startRedfish(t *testing.T, on bool) *redfishsim.Server {
	t.Helper()
	s, err := redfishsim.Start(redfishsim.Config{User: rfUser, Password: rfPassword, PoweredOn: on})
	if err != nil {
		t.Fatalf("redfishsim.Start: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func rfReq(s *redfishsim.Server, ref, op, args string) *sitev1.BmcOperationRequest {
	return &sitev1.BmcOperationRequest{Driver: "redfish", Address: "https://" + s.Addr().String(), CredentialsRef: ref,
		Operation: op, ArgsJson: args, TlsSpkiSha256: s.SPKISHA256()}
}

func TestRedfishPower(t *testing.T) {
	s := startRedfish(t, false)
	tr := newTestRelay(t, nil)
	steps := []struct {
		op, args, want string
		on             bool
	}{
		{"power.getPower", "", `{"power":"off"}`, false},
		{"power.setPower", `{"state":"on"}`, `{"requested":"on"}`, true},
		{"power.setPower", `{"state":"on"}`, `{"requested":"on"}`, true}, // already on: bmclib skips the reset
		{"power.getPower", "", `{"power":"on"}`, true},
		{"power.setPower", `{"state":"cycle"}`, `{"requested":"cycle"}`, true},
		{"power.setPower", `{"state":"reset"}`, `{"requested":"reset"}`, true},
		{"power.setPower", `{"state":"soft"}`, `{"requested":"soft"}`, false},
		{"power.setPower", `{"state":"on"}`, `{"requested":"on"}`, true},
		{"power.setPower", `{"state":"off"}`, `{"requested":"off"}`, false},
	}
	for _, st := range steps {
		wantOK(t, tr.do(t, rfReq(s, "env://RF", st.op, st.args)), st.want)
		if got := s.State().PowerOn; got != st.on {
			t.Fatalf("after %s %s the system is on=%v, want %v", st.op, st.args, got, st.on)
		}
	}
	want := []string{"On", "ForceRestart", "PowerCycle", "GracefulShutdown", "On", "ForceOff"}
	if got := s.State().Resets; !slices.Equal(got, want) {
		t.Errorf("reset types = %q, want %q", got, want)
	}
	if n := s.Sessions(); n != 0 {
		t.Errorf("%d sessions left open on the BMC", n)
	}
}

func TestRedfishCycleWhenOffIsBMCError(t *testing.T) {
	s := startRedfish(t, false)
	tr := newTestRelay(t, nil)
	wantCode(t, tr.do(t, rfReq(s, "env://RF", "power.setPower", `{"state":"cycle"}`)), relayerr.BMCError, "power.setPower")
	if s.State().PowerOn {
		t.Error("a refused cycle powered the system on")
	}
}

func TestRedfishBootDevice(t *testing.T) {
	s := startRedfish(t, true)
	tr := newTestRelay(t, nil)
	for _, tc := range []struct {
		args, want, target, enabled, mode string
	}{
		{`{"device":"pxe"}`, `{"device":"pxe","efi":false,"persistent":false}`, "Pxe", "Once", "Legacy"},
		{`{"device":"disk","persistent":true,"efi":true}`, `{"device":"disk","efi":true,"persistent":true}`, "Hdd", "Continuous", "UEFI"},
		{`{"device":"cdrom","efi":true}`, `{"device":"cdrom","efi":true,"persistent":false}`, "Cd", "Once", "UEFI"},
		{`{"device":"bios"}`, `{"device":"bios","efi":false,"persistent":false}`, "BiosSetup", "Once", "Legacy"},
	} {
		wantOK(t, tr.do(t, rfReq(s, "env://RF", "management.setBootDevice", tc.args)), tc.want)
		st := s.State()
		if st.BootTarget != tc.target || st.BootEnabled != tc.enabled || st.BootMode != tc.mode {
			t.Errorf("%s: boot = %s/%s/%s, want %s/%s/%s", tc.args, st.BootTarget, st.BootEnabled, st.BootMode,
				tc.target, tc.enabled, tc.mode)
		}
	}
}

func TestRedfishVirtualMedia(t *testing.T) {
	s := startRedfish(t, true)
	tr := newTestRelay(t, nil)
	const img = "https://images.example/boot.iso?token=abc"
	res := tr.do(t, rfReq(s, "env://RF", "virtual-media.insert", `{"url":"`+img+`"}`))
	wantOK(t, res, `{"inserted":true,"kind":"CD"}`)
	if st := s.State(); !st.MediaInserted || st.MediaImage != img {
		t.Fatalf("media after insert = %+v", st)
	}
	// Insert again: bmclib ejects the old medium first.
	wantOK(t, tr.do(t, rfReq(s, "env://RF", "virtual-media.insert", `{"kind":"DVD","url":"http://images.example/b.iso"}`)),
		`{"inserted":true,"kind":"DVD"}`)
	if st := s.State(); st.MediaImage != "http://images.example/b.iso" {
		t.Fatalf("media after second insert = %+v", st)
	}
	wantOK(t, tr.do(t, rfReq(s, "env://RF", "virtual-media.eject", "")), `{"ejected":true,"kind":"CD"}`)
	if st := s.State(); st.MediaInserted {
		t.Fatalf("media after eject = %+v", st)
	}
	// USBStick is not a media type of the BMC's only device.
	wantCode(t, tr.do(t, rfReq(s, "env://RF", "virtual-media.insert", `{"kind":"USBStick","url":"http://images.example/b.img"}`)),
		relayerr.BMCError, "virtual-media.insert")
	if log := tr.log.String(); strings.Contains(log, "images.example") {
		t.Errorf("the media URL was logged:\n%s", log)
	}
}

func TestRedfishInspect(t *testing.T) {
	s := startRedfish(t, true)
	tr := newTestRelay(t, nil)
	wantOK(t, tr.do(t, rfReq(s, "env://RF", "inspect.inspect", "")),
		`{"biosFirmware":"1.2.3","bmcFirmware":"4.5.6","model":"RF-SIM 1","power":"on","serial":"SIM-0001","vendor":"Siteboot Test"}`)
}
