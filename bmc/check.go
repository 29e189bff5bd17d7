package bmc

import (
	"encoding/json"
	"net/netip"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// check validates everything in req that needs no network and no secret,
// in a fixed order: driver, operation, args, driver options, pin, address.
func check(req *sitev1.BmcOperationRequest) (*plan, address, error) {
	var a address
	p := &plan{driver: req.GetDriver(), op: req.GetOperation()}
	if p.driver != driverIPMI && p.driver != driverRedfish {
		return nil, a, relayerr.New(relayerr.Unsupported, "driver must be ipmi or redfish")
	}
	if !knownOp(p.op) {
		return nil, a, relayerr.New(relayerr.Unsupported, "unknown operation")
	}
	if !supported(p.driver, p.op) {
		return nil, a, relayerr.New(relayerr.Unsupported, "driver %s cannot do %s", p.driver, p.op)
	}
	args, err := parseArgs(p.op, req.GetArgsJson())
	if err != nil {
		return nil, a, relayerr.New(relayerr.InvalidArgs, "%s", err.Error())
	}
	p.args = args
	opts, err := parseDriverOptions(p.driver, req.GetDriverOptionsJson())
	if err != nil {
		return nil, a, relayerr.New(relayerr.InvalidArgs, "%s", err.Error())
	}
	p.cipher = opts.CipherSuite
	if pin := req.GetTlsSpkiSha256(); len(pin) != 0 {
		if len(pin) != 32 {
			return nil, a, relayerr.New(relayerr.InvalidArgs, "tls_spki_sha256 must be 32 bytes, got %d", len(pin))
		}
		if p.driver != driverRedfish {
			return nil, a, relayerr.New(relayerr.InvalidArgs, "tls_spki_sha256 is for redfish only (ipmi has no TLS)")
		}
		p.pin = append([]byte(nil), pin...)
	}
	a, err = parseAddress(p.driver, req.GetAddress())
	if err != nil {
		return nil, a, err
	}
	port := defaultIPMIPort
	if p.driver == driverRedfish {
		port = defaultHTTPS
	}
	switch {
	case a.port != 0 && opts.Port != 0:
		return nil, a, relayerr.New(relayerr.InvalidArgs, "the port is given in both address and driver_options_json")
	case a.port != 0:
		port = a.port
	case opts.Port != 0:
		port = opts.Port
	}
	p.target = netip.AddrPortFrom(netip.Addr{}, uint16(port))
	return p, a, nil
}

func knownOp(op string) bool {
	switch op {
	case opGetPower, opSetPower, opSetBootDevice, opInsertMedia, opEjectMedia, opInspect:
		return true
	}
	return false
}

// canonicalJSON is compact JSON with sorted keys (encoding/json sorts map
// keys).
func canonicalJSON(v map[string]any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", relayerr.New(relayerr.Internal, "encode the result")
	}
	return string(b), nil
}
