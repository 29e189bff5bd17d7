// Package bmc relays BMC operations (BmcOperationRequest) to the site's
// BMCs through bmclib/v2, only to addresses inside the configured BMC
// networks, with credentials read by reference and never echoed.
//
// A request is checked completely before anything is sent: driver
// ("ipmi": bmclib's ipmitool provider, "redfish": its gofish provider;
// only that one provider is registered), operation, args_json and
// driver_options_json (strict: unknown or duplicate keys and trailing
// data are invalid-args naming the key), the SPKI pin, the address, and
// the allow-list: an IP literal, or every address a name resolves to
// (once), must be inside Config.Networks, else forbidden-target with no
// packet sent. The checked IP is what bmclib gets; for Redfish the dialer
// refuses any other address.
//
// Operations and their canonical results (compact JSON, sorted keys):
//
//	power.getPower            {}                              {"power":"on"|"off"}
//	power.setPower            {"state":"on|off|soft|reset|cycle"} {"requested":state}
//	management.setBootDevice  {"device":"pxe|disk|cdrom|bios","persistent":b,"efi":b}
//	                                                          {"device":..,"efi":..,"persistent":..}
//	virtual-media.insert      {"kind":"CD|DVD|Floppy|USBStick","url":"http(s)://…"}
//	                                                          {"inserted":true,"kind":kind}
//	virtual-media.eject       {"kind":…}                      {"ejected":true,"kind":kind}
//	inspect.inspect           {}                              power, and for redfish vendor,
//	                                                          model, serial, biosFirmware, bmcFirmware
//
// kind defaults to CD; the media URL (≤ 2048 bytes, no userinfo) is never
// echoed or logged. Virtual media is redfish only (bmclib's ipmitool
// provider has none); eject ejects every inserted medium, as bmclib does.
//
// driver_options_json: ipmi {"cipherSuite":0..17,"port":1..65535}
// (default: bmclib tries cipher suite 3, then 17; port 623); redfish
// {"port":1..65535} (default 443). bmclib v2.3.0's redfish provider does
// not pass basic auth or a system choice on, so neither is accepted. A
// port may come from the address or the options, not both.
//
// TLS: with tls_spki_sha256 (redfish only) the leaf certificate's
// SubjectPublicKeyInfo must hash to it, checked in the handshake, else
// pin-mismatch. Without a pin the BMC's certificate is not verified (BMCs
// ship self-signed ones): the allow-list is then the only protection.
// No proxy environment, no redirects, no kept connections; a response
// body is capped at 4 MiB and one operation at 16 MiB of bodies and 2000
// requests (bmc-error past a cap); a GET failing after another request of
// the operation failed is not handed to gofish (it races on two failures
// in a collection) and fails the operation, inspect excepted. Redfish is refused (internal) while
// DEBUG_BMCLIB=true is in the environment: bmclib would then print every
// request, the password included.
//
// One operation at a time per BMC (keyed by its checked IP), waiting
// within the deadline; at most MaxOperations at once over all BMCs, more
// are busy. Every operation has Config.Timeout as its deadline; ipmitool
// is killed at it, and no Redfish request is sent or read past it (gofish
// itself sends without the operation's context). Failures carry a
// relayerr code and a message written here: library errors are
// classified, never passed on. The password goes to ipmitool only through
// its environment.
package bmc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
)

// Secrets reads secret references (secretref.Resolver in the appliance).
type Secrets interface {
	Resolve(ctx context.Context, ref string) ([]byte, error)
	Check(ref string) error
}

// Defaults.
const (
	DefaultTimeout       = 2 * time.Minute
	MaxTimeout           = 10 * time.Minute
	DefaultMaxOperations = 16
)

// Config configures a Relay.
type Config struct {
	// Networks are the only addresses a BMC may have (bmc.networks). Empty
	// refuses every operation with forbidden-target.
	Networks []netip.Prefix
	// Timeout is the deadline of one operation, waiting for its BMC
	// included (0: DefaultTimeout).
	Timeout time.Duration
	// MaxOperations bounds the operations running at once over all BMCs
	// (0: DefaultMaxOperations); more are refused with busy.
	MaxOperations int
	// Secrets reads credentials_ref.
	Secrets Secrets
	// Ipmitool is the ipmitool binary (empty: "ipmitool" on PATH).
	Ipmitool string
	// Resolver resolves BMC names (nil: net.DefaultResolver).
	Resolver Resolver
	// Logger gets one line per operation, never a secret.
	Logger *slog.Logger
	// Registerer registers siteboot_bmc_* (nothing if nil).
	Registerer prometheus.Registerer
}

// Relay runs BMC operations.
type Relay struct {
	cfg      Config
	resolver Resolver
	metrics  *metrics
	slots    chan struct{}
	locks    *keyedLock
	limits   opLimits
}

// New checks cfg and returns a Relay.
func New(cfg Config) (*Relay, error) {
	if cfg.Secrets == nil || cfg.Logger == nil {
		return nil, errors.New("bmc: Config.Secrets and Config.Logger are required")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Timeout < 0 || cfg.Timeout > MaxTimeout {
		return nil, fmt.Errorf("bmc: Config.Timeout %s must be positive and at most %s", cfg.Timeout, MaxTimeout)
	}
	if cfg.MaxOperations == 0 {
		cfg.MaxOperations = DefaultMaxOperations
	}
	if cfg.MaxOperations < 0 {
		return nil, fmt.Errorf("bmc: Config.MaxOperations %d is negative", cfg.MaxOperations)
	}
	for _, p := range cfg.Networks {
		if !p.IsValid() {
			return nil, errors.New("bmc: Config.Networks holds an invalid prefix")
		}
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, resolver: cfg.Resolver, metrics: m,
		slots: make(chan struct{}, cfg.MaxOperations), locks: newKeyedLock(),
		limits: opLimits{bytes: maxOperationBytes, requests: maxOperationRequests}}
	if r.resolver == nil {
		r.resolver = net.DefaultResolver
	}
	return r, nil
}

// Do runs one operation. It never returns nil: every failure is a result
// with OK false, a relayerr code and a message without secrets.
func (r *Relay) Do(ctx context.Context, req *sitev1.BmcOperationRequest) *sitev1.BmcOperationResult {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	res, p, err := r.do(ctx, req)
	out := &sitev1.BmcOperationResult{Ok: err == nil, ResultJson: res}
	code := "ok"
	if err != nil {
		re := asRelayErr(err)
		code, out.ErrorCode, out.Message = re.Code, re.Code, re.Message
	}
	r.finish(req, p, code, out.Message, time.Since(start))
	return out
}

func asRelayErr(err error) *relayerr.Error {
	var re *relayerr.Error
	if errors.As(err, &re) {
		return re
	}
	return relayerr.New(relayerr.Internal, "unexpected failure")
}

func (r *Relay) do(ctx context.Context, req *sitev1.BmcOperationRequest) (string, *plan, error) {
	if req == nil {
		return "", nil, relayerr.New(relayerr.InvalidArgs, "no request")
	}
	p, a, err := check(req)
	if err != nil {
		return "", nil, err
	}
	ip, err := r.resolve(ctx, a)
	if err != nil {
		return "", p, err
	}
	p.target = netip.AddrPortFrom(ip, p.target.Port())
	select {
	case r.slots <- struct{}{}:
		defer func() { <-r.slots }()
	default:
		return "", p, relayerr.New(relayerr.Busy, "%d BMC operations are running already", r.cfg.MaxOperations)
	}
	creds, err := r.credentials(ctx, req.GetCredentialsRef())
	if err != nil {
		return "", p, err
	}
	unlock, err := r.locks.lock(ctx, ip)
	if err != nil {
		return "", p, relayerr.New(relayerr.Timeout, "the deadline passed waiting for another operation on %s", ip)
	}
	defer unlock()
	res, err := r.run(ctx, p, creds)
	if err != nil {
		return "", p, err
	}
	js, err := canonicalJSON(res)
	return js, p, err
}
