package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
)

// MaxExternalTTL bounds a pushed ttl_ms: a control plane that vanishes
// leaves a window of at most this long.
const MaxExternalTTL = 10 * time.Minute

// runExternal serves external mode: raft is a single voter that keeps the
// site state; once it leads and has applied its log the node is ready, and
// the gate stays closed until the control plane pushes a lease.
func (n *Node) runExternal(ctx context.Context) error {
	n.mu.Lock()
	if n.win.epoch == 0 {
		n.win.reason = "external mode: no lease pushed since this appliance started (UpdateLease, siteboot lease set)"
	}
	n.mu.Unlock()
	for {
		if n.raft.State() == raft.Leader {
			if err := n.raft.Barrier(applyTimeout).Error(); err == nil {
				n.markReady()
				break
			} else {
				n.log.Warn("lease: replaying the log failed; retrying", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			n.release("the appliance is stopping")
			return nil
		case <-n.raft.LeaderCh():
		case <-time.After(retryEvery):
		}
	}
	<-ctx.Done()
	n.release("the appliance is stopping")
	return nil
}

// UpdateLease takes a lease pushed by the control plane (external mode
// only, else ErrNotExternal). ttl_ms must be in (0, MaxExternalTTL]. An
// epoch below the highest ever pushed is refused with an *EpochError; a
// higher one is committed to the log first, so it is refused below after a
// restart too; an equal one renews. The window runs ttl_ms from the moment
// the push was received; active=false closes the gate at once.
func (n *Node) UpdateLease(ctx context.Context, ls *sitev1.BootLeaseState) (Status, error) {
	t0 := time.Now()
	if n.cfg.Mode != External {
		return Status{}, ErrNotExternal
	}
	ttl := time.Duration(ls.GetTtlMs()) * time.Millisecond
	switch {
	case ls.GetTtlMs() == 0:
		return Status{}, &UpdateError{Field: "ttl_ms", Reason: "is 0; a lease needs a ttl (at most 10m)"}
	case ttl > MaxExternalTTL:
		return Status{}, &UpdateError{Field: "ttl_ms", Reason: fmt.Sprintf("%s is above the bound of %s", ttl, MaxExternalTTL)}
	case ls.GetEpoch() == 0:
		return Status{}, &UpdateError{Field: "epoch", Reason: "is 0; epochs start at 1"}
	}
	n.pushMu.Lock()
	defer n.pushMu.Unlock()
	highest := n.fsm.externalEpoch()
	if ls.GetEpoch() < highest {
		return Status{}, &EpochError{Got: ls.GetEpoch(), Highest: highest}
	}
	if ls.GetEpoch() > highest {
		if err := n.commitExternal(ctx, ls.GetEpoch()); err != nil {
			return Status{}, err
		}
	}
	n.pushed(ls.GetEpoch(), ls.GetActive(), t0, ttl)
	return n.Status(), nil
}

// commitExternal commits epoch as the highest external epoch.
func (n *Node) commitExternal(ctx context.Context, epoch uint64) error {
	data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_ExternalEpoch{ExternalEpoch: &statev1.ExternalEpoch{Epoch: epoch}}})
	if err != nil {
		return fmt.Errorf("lease: encode: %w", err)
	}
	res, err := n.apply(ctx, data)
	if err != nil {
		return err
	}
	if got, ok := res.(externalResult); !ok || got.highest != epoch {
		return fmt.Errorf("lease: external epoch %d not applied (%v)", epoch, res)
	}
	return nil
}

// pushed applies an accepted push to the window.
func (n *Node) pushed(epoch uint64, active bool, t0 time.Time, ttl time.Duration) {
	if !active {
		n.fence(fenceInactive, fmt.Sprintf("the control plane pushed epoch %d with active=false", epoch), false)
		n.mu.Lock()
		n.win.epoch, n.win.ttl = epoch, ttl
		n.mu.Unlock()
		return
	}
	// A higher epoch takes the window over (the gate stays as it was
	// until extend moves the window).
	n.mu.Lock()
	n.win.epoch = epoch
	n.mu.Unlock()
	n.extend(epoch, t0, ttl)
}
