package bmc

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// The operations.
const (
	opGetPower      = "power.getPower"
	opSetPower      = "power.setPower"
	opSetBootDevice = "management.setBootDevice"
	opInsertMedia   = "virtual-media.insert"
	opEjectMedia    = "virtual-media.eject"
	opInspect       = "inspect.inspect"
)

// The drivers.
const (
	driverIPMI    = "ipmi"
	driverRedfish = "redfish"
)

// Size limits of the request's JSON strings and of a media URL.
const (
	maxArgsJSON     = 64 << 10
	maxOptionsJSON  = 4 << 10
	maxMediaURL     = 2048
	defaultIPMIPort = 623
	defaultHTTPS    = 443
)

var (
	powerStates = []string{"on", "off", "soft", "reset", "cycle"}
	bootDevices = []string{"pxe", "disk", "cdrom", "bios"}
	mediaKinds  = []string{"CD", "DVD", "Floppy", "USBStick"}
)

// opArgs are the parsed args_json of every operation.
type opArgs struct {
	State      string
	Device     string
	Persistent bool
	EFI        bool
	Kind       string
	URL        string
}

// supported reports whether driver can do op.
func supported(driver, op string) bool {
	switch op {
	case opGetPower, opSetPower, opSetBootDevice, opInspect:
		return true
	case opInsertMedia, opEjectMedia:
		return driver == driverRedfish
	}
	return false
}

// parseArgs checks args_json of op (a known operation).
func parseArgs(op, data string) (opArgs, error) {
	var a opArgs
	if len(data) > maxArgsJSON {
		return a, fmt.Errorf("args_json: longer than %d bytes", maxArgsJSON)
	}
	fields := map[string]fieldFunc{}
	switch op {
	case opSetPower:
		fields["state"] = stringField(&a.State)
	case opSetBootDevice:
		fields["device"] = stringField(&a.Device)
		fields["persistent"] = boolField(&a.Persistent)
		fields["efi"] = boolField(&a.EFI)
	case opInsertMedia:
		fields["url"] = stringField(&a.URL)
		fields["kind"] = stringField(&a.Kind)
	case opEjectMedia:
		fields["kind"] = stringField(&a.Kind)
	}
	if err := decodeStrict("args_json", data, fields); err != nil {
		return a, err
	}
	return a, a.check(op)
}

func (a *opArgs) check(op string) error {
	switch op {
	case opSetPower:
		return oneOf("state", a.State, powerStates)
	case opSetBootDevice:
		return oneOf("device", a.Device, bootDevices)
	case opInsertMedia:
		if err := a.defaultKind(); err != nil {
			return err
		}
		return checkMediaURL(a.URL)
	case opEjectMedia:
		return a.defaultKind()
	}
	return nil
}

func (a *opArgs) defaultKind() error {
	if a.Kind == "" {
		a.Kind = "CD"
	}
	return oneOf("kind", a.Kind, mediaKinds)
}

func oneOf(key, v string, allowed []string) error {
	if v == "" {
		return fmt.Errorf("args_json: %q is required (one of %s)", key, strings.Join(allowed, ", "))
	}
	if !slices.Contains(allowed, v) {
		return fmt.Errorf("args_json: %q must be one of %s", key, strings.Join(allowed, ", "))
	}
	return nil
}

// checkMediaURL accepts an absolute http(s) URL with a host and no
// userinfo. The URL is never echoed: it may carry a token in its query.
func checkMediaURL(s string) error {
	if s == "" {
		return fmt.Errorf("args_json: %q is required", "url")
	}
	if len(s) > maxMediaURL {
		return fmt.Errorf("args_json: %q is longer than %d bytes", "url", maxMediaURL)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r == 0x7f }) {
		return fmt.Errorf("args_json: %q holds spaces or control characters", "url")
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("args_json: %q is not a URL", "url")
	}
	if sch := strings.ToLower(u.Scheme); sch != "http" && sch != "https" {
		return fmt.Errorf("args_json: %q must be an http or https URL", "url")
	}
	if u.User != nil {
		return fmt.Errorf("args_json: %q must not hold userinfo", "url")
	}
	if u.Host == "" {
		return fmt.Errorf("args_json: %q has no host", "url")
	}
	return nil
}

// driverOptions are the parsed driver_options_json.
type driverOptions struct {
	Port        int
	CipherSuite int // -1: bmclib's default (3, then 17)
}

// parseDriverOptions checks driver_options_json. ipmi takes cipherSuite
// (0..17) and port; redfish takes port. bmclib v2.3.0's redfish provider
// does not pass basic auth or a system choice on, so neither is offered.
func parseDriverOptions(driver, data string) (driverOptions, error) {
	o := driverOptions{CipherSuite: -1}
	if len(data) > maxOptionsJSON {
		return o, fmt.Errorf("driver_options_json: longer than %d bytes", maxOptionsJSON)
	}
	fields := map[string]fieldFunc{"port": intField(&o.Port, 1, 65535)}
	if driver == driverIPMI {
		fields["cipherSuite"] = intField(&o.CipherSuite, 0, 17)
	}
	return o, decodeStrict("driver_options_json", data, fields)
}
