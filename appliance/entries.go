package appliance

import (
	"context"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Entry is a stored boot entry as the operations report it.
type Entry struct {
	NodeID    string
	Entry     *sitev1.ProxyDhcpEntry
	CreatedAt time.Time
	// Live: not_after lies in the future, so the entry is answered.
	Live bool
}

// PrepareRamdisk validates and stores one node's entries
// (boot.prepareRamdisk): all or nothing; an entry replaces the node's entry
// for the same MAC. It returns once the local parts follow the change.
func (a *Appliance) PrepareRamdisk(ctx context.Context, nodeID string, entries []*sitev1.ProxyDhcpEntry) ([]Entry, error) {
	if err := a.started(); err != nil {
		return nil, err
	}
	stored, err := a.store.PrepareRamdisk(ctx, nodeID, entries)
	if err != nil {
		return nil, err
	}
	if err := a.waitSynced(ctx); err != nil {
		return nil, err
	}
	return a.entries(stored), nil
}

// CleanUp drops a node's entries (boot.cleanUp): all, or those of the given
// MACs and/or workflow. It returns the MACs removed.
func (a *Appliance) CleanUp(ctx context.Context, req *sitev1.BootCleanUpRequest) ([]string, error) {
	if err := a.started(); err != nil {
		return nil, err
	}
	removed, err := a.store.CleanUp(ctx, req)
	if err != nil {
		return nil, err
	}
	return removed, a.waitSynced(ctx)
}

// Entries lists the stored entries of one node (every node when nodeID is
// empty), live or not, by node then MAC.
func (a *Appliance) Entries(_ context.Context, nodeID string) ([]Entry, error) {
	if err := a.started(); err != nil {
		return nil, err
	}
	return a.entries(a.state.List(nodeID)), nil
}

func (a *Appliance) entries(stored []*statev1.StoredEntry) []Entry {
	now := a.now()
	out := make([]Entry, 0, len(stored))
	for _, se := range stored {
		out = append(out, Entry{
			NodeID:    se.GetNodeId(),
			Entry:     se.GetEntry(),
			CreatedAt: timeOf(se.GetCreatedAt()),
			Live:      se.GetEntry().GetNotAfter().AsTime().After(now),
		})
	}
	return out
}

// timeOf is t as a time.Time; the zero time when t is unset.
func timeOf(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}
