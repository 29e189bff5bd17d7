package lease

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Status is the boot lease as this node sees it.
type Status struct {
	// Mode is the configured lease source.
	Mode Mode
	// Active: the gate is open now.
	Active bool
	// Epoch is the newest epoch this node knows: committed through raft,
	// or the highest pushed in external mode.
	Epoch uint64
	// TTL is the lease ttl: the configured one, or the one last pushed.
	TTL time.Duration
	// Holder is the node id that took Epoch (empty in external mode).
	Holder string
	// ValidUntil is when this node's window ends, on the wall clock (the
	// gate itself reads the monotonic clock); zero while it holds none.
	ValidUntil time.Time
	// FencedReason says why the gate is closed; empty while Active.
	FencedReason string
	// RaftState is this node's raft role; AppliedIndex the last log index
	// applied locally; Leader the leader's raft address, when known.
	RaftState    string
	AppliedIndex uint64
	Leader       string
	// FenceEvents counts the times the gate closed on its own (window
	// expired, leadership lost, pushed inactive).
	FenceEvents uint64
	// Members are the site's raft voters (Members).
	Members []Member
}

// Status reports the boot lease as this node sees it.
func (n *Node) Status() Status {
	n.mu.Lock()
	w, events := n.win, n.events
	n.mu.Unlock()
	_, open := n.Gate()
	addr, _ := n.raft.LeaderWithID()
	st := Status{Mode: n.cfg.Mode, Active: open, TTL: n.cfg.TTL, RaftState: n.raft.State().String(),
		AppliedIndex: n.AppliedIndex(), Leader: string(addr), FenceEvents: events, Members: n.Members()}
	if n.cfg.Mode == External {
		st.Epoch = n.fsm.externalEpoch()
		if w.ttl > 0 {
			st.TTL = w.ttl
		}
	} else {
		st.Epoch, st.Holder = n.fsm.current()
	}
	if w.epoch != 0 && !w.until.IsZero() {
		st.ValidUntil = w.until.Round(0)
	}
	if !open {
		st.FencedReason = n.fencedReason(w, addr)
	}
	return st
}

// fencedReason says why the gate is closed.
func (n *Node) fencedReason(w window, leader raft.ServerAddress) string {
	if state := n.raft.State(); n.cfg.Mode != External && state != raft.Leader {
		if leader == "" {
			return fmt.Sprintf("this appliance is not the raft leader (%s) and no leader is known", state)
		}
		return fmt.Sprintf("this appliance is not the raft leader (%s); the leader is %s", state, leader)
	}
	switch {
	case w.epoch == 0 || w.until.IsZero():
		if w.reason == "" {
			return "no lease held yet"
		}
		return w.reason
	case w.reason != "":
		return w.reason
	}
	return fmt.Sprintf("the window of epoch %d ended at %s without a renewal", w.epoch, w.until.Round(0).Format(time.RFC3339Nano))
}
