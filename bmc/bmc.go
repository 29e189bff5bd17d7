// Package bmc relays BMC operations (BmcOperationRequest) to the site's
// BMCs through bmclib/v2, only to addresses inside the configured BMC
// networks, with credentials read by reference and never echoed.
//
// CONTRACT SKELETON: the API below is fixed; the bodies are filled in by
// the Relays work (see RELAYS-PLAN.md while it is in progress).
package bmc

import (
	"context"
	"errors"
	"log/slog"
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
	// Logger gets one line per operation, never a secret.
	Logger *slog.Logger
	// Registerer registers siteboot_bmc_* (nothing if nil).
	Registerer prometheus.Registerer
}

// Relay runs BMC operations.
type Relay struct{ cfg Config }

// New checks cfg and returns a Relay.
func New(cfg Config) (*Relay, error) {
	if cfg.Secrets == nil || cfg.Logger == nil {
		return nil, errors.New("bmc: Config.Secrets and Config.Logger are required")
	}
	return &Relay{cfg: cfg}, nil
}

// Do runs one operation. It never returns nil: every failure is a result
// with OK false, a relayerr code and a message without secrets.
func (r *Relay) Do(ctx context.Context, req *sitev1.BmcOperationRequest) *sitev1.BmcOperationResult {
	return &sitev1.BmcOperationResult{ErrorCode: relayerr.Unsupported, Message: "not built yet"}
}
