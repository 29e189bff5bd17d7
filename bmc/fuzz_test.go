package bmc

import (
	"slices"
	"strings"
	"testing"
)

// FuzzArgs checks the args_json and driver_options_json parsers: no
// panic, every error names its field, and what is accepted is valid.
func FuzzArgs(f *testing.F) {
	for _, s := range []string{"", "{}", `{"state":"on"}`, `{"device":"pxe","persistent":true,"efi":false}`,
		`{"kind":"DVD","url":"https://h/x.iso"}`, `{"state":"on","state":"off"}`, `{"port":623,"cipherSuite":3}`,
		`{"a":1} x`, `[`, `{"url":"http://u@h"}`} {
		f.Add(s)
	}
	ops := []string{opGetPower, opSetPower, opSetBootDevice, opInsertMedia, opEjectMedia, opInspect}
	f.Fuzz(func(t *testing.T, data string) {
		for _, op := range ops {
			a, err := parseArgs(op, data)
			if err != nil {
				if !strings.HasPrefix(err.Error(), "args_json: ") {
					t.Fatalf("parseArgs(%s) error %q does not name args_json", op, err)
				}
				continue
			}
			checkAccepted(t, op, a)
		}
		for _, d := range []string{driverIPMI, driverRedfish} {
			o, err := parseDriverOptions(d, data)
			if err != nil {
				if !strings.HasPrefix(err.Error(), "driver_options_json: ") {
					t.Fatalf("parseDriverOptions error %q", err)
				}
				continue
			}
			if o.Port < 0 || o.Port > 65535 || o.CipherSuite < -1 || o.CipherSuite > 17 || (d == driverRedfish && o.CipherSuite != -1) {
				t.Fatalf("parseDriverOptions(%s, %q) accepted %+v", d, data, o)
			}
		}
	})
}

func checkAccepted(t *testing.T, op string, a opArgs) {
	t.Helper()
	switch op {
	case opSetPower:
		if !slices.Contains(powerStates, a.State) {
			t.Fatalf("accepted state %q", a.State)
		}
	case opSetBootDevice:
		if !slices.Contains(bootDevices, a.Device) {
			t.Fatalf("accepted device %q", a.Device)
		}
	case opInsertMedia, opEjectMedia:
		if !slices.Contains(mediaKinds, a.Kind) {
			t.Fatalf("accepted kind %q", a.Kind)
		}
		if op == opInsertMedia && (a.URL == "" || len(a.URL) > maxMediaURL || strings.Contains(a.URL, "@") && checkMediaURL(a.URL) != nil) {
			t.Fatalf("accepted url %q", a.URL)
		}
	}
}
