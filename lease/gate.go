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

// retryEvery is how soon a failed epoch proposal or Barrier is tried again.
const retryEvery = 200 * time.Millisecond

// Run keeps the boot lease until ctx ends. In standalone and cluster mode,
// each time this node takes raft leadership it commits a new epoch and
// holds it (see hold); losing leadership closes the gate at once. In
// external mode it waits for the control plane's pushes (UpdateLease).
func (n *Node) Run(ctx context.Context) error {
	defer n.startPublishing(ctx)() // this node's member key
	if n.cfg.Mode == External {
		return n.runExternal(ctx)
	}
	leaderCh := n.raft.LeaderCh()
	var term *holding
	stop := func() {
		if term != nil {
			term.cancel()
			<-term.done
			term = nil
		}
	}
	defer stop()
	// A cluster member may become ready as a follower: poll for it.
	var readyPoll <-chan time.Time
	if n.cfg.Mode == Cluster {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		readyPoll = tick.C
	}
	for {
		if term == nil && n.raft.State() == raft.Leader {
			term = n.startHolding(ctx)
		}
		var ended <-chan struct{}
		if term != nil {
			ended = term.done
		}
		select {
		case <-ctx.Done():
			stop()
			n.release("the appliance is stopping")
			return nil
		case leader := <-leaderCh:
			if !leader {
				stop()
				n.fence(fenceLeadershipLost, "raft leadership was lost", true)
			}
		case <-ended: // leadership could not be verified; a new term starts over
			term = nil
			n.waitOrDone(ctx, retryEvery)
		case <-readyPoll:
			if n.replayed() {
				n.markReady()
				readyPoll = nil
			}
		}
	}
}

// holding is one term's holder goroutine.
type holding struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (n *Node) startHolding(ctx context.Context) *holding {
	won, term := time.Now(), n.raft.CurrentTerm()
	ctx, cancel := context.WithCancel(ctx)
	h := &holding{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		n.hold(ctx, won, term)
	}()
	return h
}

// hold is the holder for one raft term won at won: it commits a new epoch
// (after a Barrier, so the epoch is above every one in the log); in
// cluster mode it then waits ttl + margin from won, so the window of any
// former holder, which renewed before this node won, has ended by then;
// and it renews the window every ttl/3 until leadership cannot be
// verified or ctx ends.
func (n *Node) hold(ctx context.Context, won time.Time, term uint64) {
	var epoch uint64
	for epoch == 0 {
		var err error
		if epoch, err = n.takeEpoch(); err != nil {
			n.log.Warn("lease: taking an epoch failed; retrying", "err", err)
			if !n.waitOrDone(ctx, retryEvery) {
				return
			}
		}
	}
	if n.cfg.Mode == Cluster {
		opens := won.Add(n.cfg.TTL + n.cfg.Margin)
		n.take(epoch, fmt.Sprintf("a new holder waits ttl + margin (%s) after winning before it answers, until %s",
			n.cfg.TTL+n.cfg.Margin, opens.Round(0).Format(time.RFC3339Nano)))
		n.log.Info("lease: epoch taken; waiting ttl + margin before answering", "epoch", epoch, "opens", opens.Round(0))
		if !n.waitOrDone(ctx, time.Until(opens)) {
			return
		}
	} else {
		n.take(epoch, "taken, not yet verified")
	}
	tick := time.NewTicker(n.cfg.TTL / 3)
	defer tick.Stop()
	for n.renew(epoch, term) {
		if n.cfg.Mode == Standalone {
			n.markReady()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// renew re-verifies leadership and extends the window to the time before
// the check + ttl. It fences and reports false when leadership cannot be
// verified in the term the epoch was taken in.
func (n *Node) renew(epoch, term uint64) bool {
	t0 := time.Now()
	err := n.verify()
	if err == nil && n.raft.CurrentTerm() != term {
		err = errors.New("raft moved on to another term")
	}
	if err != nil {
		n.fence(fenceLeadershipLost, "raft leadership could not be verified: "+err.Error(), true)
		return false
	}
	n.extend(epoch, t0, n.cfg.TTL)
	return true
}

// verifyLeadership confirms that a quorum still follows this node in its
// term, by a round trip begun after the caller read t0. In cluster mode it
// commits a barrier entry: an entry appended now can only be committed by
// followers that stored it in this term, so after t0, when none of them
// could have voted for another leader yet. raft's VerifyLeader is not
// enough there: it counts any answer to an AppendEntries that arrives
// after it was asked, also one to a heartbeat sent up to the transport
// timeout earlier, so a leader whose followers' answers travel slowly can
// verify a leadership that a quorum gave up before t0, and keep its window
// open beside the new holder's. A single voter has nobody to ask.
func (n *Node) verifyLeadership() error {
	if n.cfg.Mode != Cluster {
		return n.raft.VerifyLeader().Error()
	}
	return n.raft.Barrier(n.cfg.TTL).Error()
}

// waitOrDone waits d and reports whether ctx is still live.
func (n *Node) waitOrDone(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// replayed reports whether a cluster member's state is usable: a leader
// is known, and this node applied what the leader says is committed and
// what its own log held when it opened (unless raft cut that back).
func (n *Node) replayed() bool {
	if addr, _ := n.raft.LeaderWithID(); addr == "" {
		return false
	}
	commit, applied := n.raft.CommitIndex(), n.raft.AppliedIndex()
	return commit > 0 && applied >= commit && (applied >= n.lastAtOpen || n.raft.LastIndex() < n.lastAtOpen)
}

// takeEpoch commits the epoch after the newest one applied, held by this
// node.
func (n *Node) takeEpoch() (uint64, error) {
	if err := n.raft.Barrier(applyTimeout).Error(); err != nil {
		return 0, n.applyError(err)
	}
	cur, _ := n.fsm.current()
	if cur == math.MaxUint64 {
		return 0, errors.New("lease: the epoch counter is exhausted")
	}
	data, err := proto.Marshal(&statev1.LogEntry{Kind: &statev1.LogEntry_LeaseEpoch{
		LeaseEpoch: &statev1.LeaseEpoch{Epoch: cur + 1, Holder: n.cfg.ID},
	}})
	if err != nil {
		return 0, err
	}
	res, err := n.apply(context.Background(), data)
	if err != nil {
		return 0, err
	}
	got, ok := res.(epochResult)
	if !ok {
		return 0, fmt.Errorf("lease: epoch not applied: %v", res)
	}
	if got.holder != n.cfg.ID || got.epoch != cur+1 {
		return 0, errStaleEpoch
	}
	n.log.Info("lease: epoch taken", "epoch", got.epoch, "ttl", n.cfg.TTL)
	return got.epoch, nil
}

// errStaleEpoch: the epoch applied is not the one this node proposed.
var errStaleEpoch = errors.New("lease: another holder committed a newer epoch")

// LeaseState is the boot lease as BootLeaseState: active while the gate is
// open; epoch is the newest known epoch either way (committed, or pushed
// in external mode).
func (n *Node) LeaseState() *sitev1.BootLeaseState {
	st := n.Status()
	return &sitev1.BootLeaseState{Active: st.Active, Epoch: st.Epoch, TtlMs: uint32(st.TTL.Milliseconds())}
}

// Mode is the configured lease source: "standalone", "cluster" or
// "external".
func (n *Node) Mode() string { return string(n.cfg.Mode) }
