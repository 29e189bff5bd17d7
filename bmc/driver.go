package bmc

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	"github.com/bmc-toolbox/bmclib/v2/providers/ipmitool"
	"github.com/bmc-toolbox/bmclib/v2/providers/redfish"
	"github.com/bmc-toolbox/common"
	"github.com/go-logr/logr"
	"github.com/jacobweinstock/registrar"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// plan is a checked request: everything run needs, nothing unchecked.
type plan struct {
	driver string
	op     string
	args   opArgs
	target netip.AddrPort // the checked IP and the port to use
	pin    []byte
	cipher int // ipmi cipher suite, -1: bmclib's default
}

// credentials is the parsed secret behind credentials_ref.
type credentials struct {
	Username string
	Password string
}

// session is one bmclib client with exactly one provider registered.
type session struct {
	client  *bmclib.Client
	redfish *redfish.Conn // set for the redfish driver
	trace   *trace
}

// newSession builds the bmclib client for p. Only p.driver's provider is
// registered (bmclib would otherwise register every provider it knows and,
// with a deadline, try them all); nothing is sent here.
func (r *Relay) newSession(ctx context.Context, p *plan, c credentials) (*session, error) {
	host := hostLiteral(p.target.Addr())
	port := strconv.Itoa(int(p.target.Port()))
	reg := registrar.NewRegistry()
	s := &session{trace: &trace{}}
	switch p.driver {
	case driverIPMI:
		path, err := exec.LookPath(r.ipmitool())
		if err != nil {
			return nil, relayerr.New(relayerr.Internal, "ipmitool %q not found", r.ipmitool())
		}
		opts := []ipmitool.Option{ipmitool.WithPort(port), ipmitool.WithIpmitoolPath(path)}
		if p.cipher >= 0 {
			opts = append(opts, ipmitool.WithCipherSuite(strconv.Itoa(p.cipher)))
		}
		drv, err := ipmitool.New(host, c.Username, c.Password, opts...)
		if err != nil {
			return nil, relayerr.New(relayerr.Internal, "set up ipmitool")
		}
		reg.Register(ipmitool.ProviderName, ipmitool.ProviderProtocol, ipmitool.Features, nil, drv)
	case driverRedfish:
		// bmclib has gofish dump every request, the session login with
		// the password included, to stdout when this is set.
		if os.Getenv("DEBUG_BMCLIB") == "true" {
			return nil, relayerr.New(relayerr.Internal,
				"DEBUG_BMCLIB=true is set in siteboot's environment (bmclib would print the credentials): redfish is refused until it is unset")
		}
		hc := newHTTPClient(ctx, p.target, p.pin, s.trace, r.limits)
		s.redfish = redfish.New(host, c.Username, c.Password, logr.Discard(),
			redfish.WithHttpClient(hc), redfish.WithPort(port))
		reg.Register(redfish.ProviderName, redfish.ProviderProtocol, redfish.Features, nil, s.redfish)
	}
	s.client = bmclib.NewClient(host, c.Username, c.Password, bmclib.WithRegistry(reg))
	s.client.Registry.Drivers = reg.Drivers
	return s, nil
}

func (r *Relay) ipmitool() string {
	if r.cfg.Ipmitool != "" {
		return r.cfg.Ipmitool
	}
	return "ipmitool"
}

// run opens a session, runs the operation and closes the session.
func (r *Relay) run(ctx context.Context, p *plan, c credentials) (map[string]any, error) {
	s, err := r.newSession(ctx, p, c)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := s.trace.stoppedOr(p.op, s.client.Open(ctx)); err != nil {
		return nil, classify(ctx, p, phaseOpen, err, s.trace, time.Since(start))
	}
	defer func() {
		if ctx.Err() == nil {
			_ = s.client.Close(ctx)
		}
	}()
	res, err := s.do(ctx, p)
	if err = s.trace.stoppedOr(p.op, err); err != nil {
		return nil, classify(ctx, p, phaseOperation, err, s.trace, time.Since(start))
	}
	return res, nil
}

func (s *session) do(ctx context.Context, p *plan) (map[string]any, error) {
	a := p.args
	switch p.op {
	case opGetPower:
		return s.power(ctx)
	case opSetPower:
		if err := s.setPower(ctx, a.State); err != nil {
			return nil, err
		}
		return map[string]any{"requested": a.State}, nil
	case opSetBootDevice:
		if _, err := s.client.SetBootDevice(ctx, a.Device, a.Persistent, a.EFI); err != nil {
			return nil, err
		}
		return map[string]any{"device": a.Device, "persistent": a.Persistent, "efi": a.EFI}, nil
	case opInsertMedia:
		if _, err := s.client.SetVirtualMedia(ctx, a.Kind, a.URL); err != nil {
			return nil, err
		}
		return map[string]any{"inserted": true, "kind": a.Kind}, nil
	case opEjectMedia:
		if _, err := s.client.SetVirtualMedia(ctx, a.Kind, ""); err != nil {
			return nil, err
		}
		return map[string]any{"ejected": true, "kind": a.Kind}, nil
	case opInspect:
		return s.inspect(ctx, p.driver)
	}
	return nil, relayerr.New(relayerr.Unsupported, "operation %q", p.op)
}

// setPower sets the power state. bmclib's redfish provider reports a
// graceful shutdown ("soft") as not done even when the BMC accepted it,
// so that one call goes to the provider and only its error counts.
func (s *session) setPower(ctx context.Context, state string) error {
	if s.redfish != nil && state == "soft" {
		_, err := s.redfish.PowerSet(ctx, state)
		return err
	}
	_, err := s.client.SetPowerState(ctx, state)
	return err
}

func (s *session) power(ctx context.Context) (map[string]any, error) {
	raw, err := s.client.GetPowerState(ctx)
	if err != nil {
		return nil, err
	}
	state, ok := normalisePower(raw)
	if !ok {
		return nil, relayerr.New(relayerr.BMCError, "the BMC reported a power state that is neither on nor off")
	}
	return map[string]any{"power": state}, nil
}

// normalisePower maps bmclib's unnormalised answers ("On", "PoweringOff",
// "Chassis Power is on\n") to on or off; a transition counts as the state
// it goes to.
func normalisePower(raw string) (string, bool) {
	s := strings.ToLower(strings.TrimSpace(raw))
	s = strings.TrimPrefix(s, "chassis power is ")
	switch s {
	case "on", "poweringon":
		return "on", true
	case "off", "poweringoff":
		return "off", true
	}
	return "", false
}

// inspect gives what the driver knows. Redfish: vendor, model, serial,
// BIOS and BMC firmware versions and power. ipmi: bmclib's ipmitool
// provider reads no inventory, so only power.
func (s *session) inspect(ctx context.Context, driver string) (map[string]any, error) {
	res, err := s.power(ctx)
	if err != nil {
		return nil, err
	}
	if driver != driverRedfish {
		return res, nil
	}
	dev, err := s.client.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	addInventory(res, dev)
	return res, nil
}

func addInventory(res map[string]any, dev *common.Device) {
	set := func(k, v string) {
		if v = strings.TrimSpace(v); v != "" {
			res[k] = truncate(v, 256)
		}
	}
	set("vendor", dev.Vendor)
	set("model", dev.Model)
	set("serial", dev.Serial)
	if dev.BIOS != nil && dev.BIOS.Firmware != nil {
		set("biosFirmware", dev.BIOS.Firmware.Installed)
	}
	if dev.BMC != nil && dev.BMC.Firmware != nil {
		set("bmcFirmware", dev.BMC.Firmware.Installed)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
