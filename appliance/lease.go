package appliance

import (
	"context"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/lease"
)

// leaseConfig is the lease node's configuration from lease.* and the
// node key.
func (a *Appliance) leaseConfig() (lease.Config, error) {
	pub, err := x509.MarshalPKIXPublicKey(a.signer.Public())
	if err != nil {
		return lease.Config{}, fmt.Errorf("lease: node public key: %w", err)
	}
	l := a.cfg.Lease
	return lease.Config{
		Mode: lease.Mode(l.Mode), Dir: filepath.Join(a.cfg.DataDir, "raft"), ID: a.cfg.NodeID,
		Bind: l.Raft.Bind, Advertise: l.Raft.Advertise, Join: l.Raft.Join, TLS: a.cfg.raftTLS(),
		TTL: time.Duration(l.TTL), Margin: time.Duration(l.Margin), PublicKey: pub,
		StateMachine: a.state, Logger: a.log, Registerer: a.reg,
	}, nil
}

// Lease reports the boot lease as this appliance sees it. Like Status it
// answers while the appliance starts.
func (a *Appliance) Lease(context.Context) (lease.Status, error) {
	return a.node.Status(), nil
}

// UpdateLease takes a boot lease pushed by the control plane (lease.mode
// external): see lease.Node.UpdateLease for what is refused.
func (a *Appliance) UpdateLease(ctx context.Context, ls *sitev1.BootLeaseState) (lease.Status, error) {
	if err := a.started(); err != nil {
		return lease.Status{}, err
	}
	return a.node.UpdateLease(ctx, ls)
}
