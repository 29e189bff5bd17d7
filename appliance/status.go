package appliance

import (
	"context"
	"time"

	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/images"
	"github.com/siteboot/siteboot/lease"
)

// Status is what the appliance is, holds and whether it may answer.
type Status struct {
	SiteID, NodeID, Version string
	StartedAt               time.Time
	// Ready: the state is restored and every operation is served. Until
	// then NotReady says why, and the counts below are zero.
	Ready    bool
	NotReady string

	Entries, LiveEntries, Nodes int
	Lease                       *sitev1.BootLeaseState
	LeaseMode, RaftState        string
	AppliedIndex                uint64
	// LeaseStatus is the boot lease in full (Lease and LeaseMode in short).
	LeaseStatus lease.Status

	BootFilesDir string
	BootFiles    []images.File
	Discovered   int
	NodeKeyID    string
	NodeKeyPEM   []byte
	Listeners    []Listener
	Images       *agentv1.ImagesSection
}

// Status reports the appliance's status. Unlike every other operation it
// answers while the appliance is starting, saying so.
func (a *Appliance) Status(context.Context) (Status, error) {
	ls := a.node.Status()
	st := Status{
		SiteID: a.cfg.SiteID, NodeID: a.cfg.NodeID, Version: a.version, StartedAt: a.startedAt,
		Lease:     &sitev1.BootLeaseState{Active: ls.Active, Epoch: ls.Epoch, TtlMs: uint32(ls.TTL.Milliseconds())},
		LeaseMode: string(ls.Mode), RaftState: ls.RaftState, AppliedIndex: ls.AppliedIndex, LeaseStatus: ls,
		BootFilesDir: a.boot.Dir(), BootFiles: a.boot.Files(),
		NodeKeyID: a.signer.KID(), NodeKeyPEM: a.signer.PublicKeyPEM(),
		Listeners: a.Listeners(),
	}
	if err := a.started(); err != nil {
		st.NotReady = err.Error()
		return st, nil
	}
	st.Ready = true
	st.Entries, st.LiveEntries, st.Nodes = a.state.Counts(a.now())
	st.Discovered = a.ledger.Count()
	st.Images = a.cache.Section()
	return st, nil
}
