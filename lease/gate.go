package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/raft"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"google.golang.org/protobuf/proto"
)

// Run keeps the boot lease: each time this node takes raft leadership it
// commits a new epoch and opens the gate; the gate closes the moment
// leadership is lost. Run returns when ctx ends.
func (n *Node) Run(ctx context.Context) error {
	defer n.startPublishing(ctx)() // this node's member key
	leaderCh := n.raft.LeaderCh()
	leader := n.raft.State() == raft.Leader
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		if leader && n.heldEpoch() == 0 {
			if err := n.takeEpoch(); err != nil {
				n.log.Warn("lease: taking an epoch failed; retrying", "err", err)
				retry.Reset(200 * time.Millisecond)
			}
		}
		select {
		case <-ctx.Done():
			n.setEpoch(0)
			return nil
		case leader = <-leaderCh:
			if !leader {
				n.log.Warn("lease: raft leadership lost; gate closed", "epoch", n.heldEpoch())
				n.setEpoch(0)
			}
		case <-retry.C:
		}
	}
}

func (n *Node) takeEpoch() error {
	if err := n.raft.Barrier(applyTimeout).Error(); err != nil {
		return n.applyError(err)
	}
	cur, _ := n.fsm.current()
	if cur == math.MaxUint64 {
		return errors.New("lease: the epoch counter is exhausted")
	}
	data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_LeaseEpoch{
		LeaseEpoch: &statev1.LeaseEpoch{Epoch: cur + 1, Holder: n.cfg.ID},
	}})
	if err != nil {
		return err
	}
	res, err := n.apply(context.Background(), data)
	if err != nil {
		return err
	}
	got, ok := res.(epochResult)
	if !ok {
		return fmt.Errorf("lease: epoch not applied: %v", res)
	}
	if got.holder != n.cfg.ID || got.epoch != cur+1 {
		return errStaleEpoch
	}
	n.setEpoch(got.epoch)
	n.log.Info("lease: epoch taken; gate open", "epoch", got.epoch, "ttl", n.cfg.TTL)
	return nil
}

// errStaleEpoch: the epoch applied is not the one this node proposed.
var errStaleEpoch = errors.New("lease: another holder committed a newer epoch")

func (n *Node) setEpoch(e uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.epoch = e
	if e != 0 && !n.ready {
		n.ready = true
		close(n.readyCh)
	}
}

func (n *Node) heldEpoch() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.epoch
}

// Ready is closed once this node has held the lease for the first time.
func (n *Node) Ready() <-chan struct{} { return n.readyCh }

// Gate reports whether this appliance may answer now, and under which
// epoch. It is checked right before every proxy reply, script and
// signature.
func (n *Node) Gate() (epoch uint64, open bool) {
	e := n.heldEpoch()
	if e == 0 || n.raft.State() != raft.Leader {
		return 0, false
	}
	return e, true
}

// LeaseState is the boot lease as BootLeaseState: active while the gate is
// open; epoch is the newest committed epoch either way.
func (n *Node) LeaseState() *sitev1.BootLeaseState {
	committed, _ := n.fsm.current()
	_, open := n.Gate()
	return &sitev1.BootLeaseState{Active: open, Epoch: committed, TtlMs: uint32(n.cfg.TTL.Milliseconds())}
}

// Mode is the lease source: "standalone" for now.
func (n *Node) Mode() string { return "standalone" }
