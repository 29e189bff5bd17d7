package lease

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// ErrNotCluster: membership changes need the cluster lease mode.
var ErrNotCluster = errors.New("lease: membership changes need lease.mode cluster")

// Member is one server of the raft configuration, with what it published
// through the log.
type Member struct {
	// ServerID is the raft server id (in cluster mode, its raft address).
	ServerID string
	Address  string
	// Suffrage is "Voter", "Nonvoter" or "Staging".
	Suffrage string
	Leader   bool
	// NodeID and KeyID are the node id and key id of the member key
	// published for Address; empty until the member published one.
	NodeID, KeyID string
}

// Members returns the raft configuration as this node knows it, read
// locally.
func (n *Node) Members() []Member {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	leader, _ := n.raft.LeaderWithID()
	byAddr := map[string]PublicKey{}
	var lone PublicKey
	for _, k := range n.Keys() {
		if k.Address == "" {
			lone = k
		} else {
			byAddr[k.Address] = k
		}
	}
	servers := f.Configuration().Servers
	out := make([]Member, 0, len(servers))
	for _, s := range servers {
		m := Member{ServerID: string(s.ID), Address: string(s.Address), Suffrage: s.Suffrage.String(),
			Leader: leader != "" && s.Address == leader}
		k, ok := byAddr[string(s.Address)]
		if !ok && len(servers) == 1 {
			// A single voter without a network transport publishes no address.
			k, ok = lone, lone.NodeID != ""
		}
		if ok {
			m.NodeID, m.KeyID = k.NodeID, k.KID
		}
		out = append(out, m)
	}
	return out
}

// AddVoter adds a voter by its raft address, which becomes its server id
// too. It is a cluster-mode operation; a follower forwards it to the
// leader.
func (n *Node) AddVoter(ctx context.Context, addr string) error {
	return n.membership(ctx, opAddVoter, addr)
}

// RemoveServer removes the server with this raft address from the
// configuration. It is a cluster-mode operation; a follower forwards it to
// the leader.
func (n *Node) RemoveServer(ctx context.Context, addr string) error {
	return n.membership(ctx, opRemoveServer, addr)
}

func (n *Node) membership(ctx context.Context, op forwardOp, addr string) error {
	if n.cfg.Mode != Cluster {
		return ErrNotCluster
	}
	if err := checkAddress(addr); err != nil {
		return &AddressError{Address: addr, Reason: err.Error()}
	}
	if op == opAddVoter && !n.cfg.TLS.Set() && !isLoopbackBind(addr) {
		return &AddressError{Address: addr, Reason: addr + " is not a loopback address and raft runs without TLS here: " +
			"a voter on the network must be dialed with mutual TLS (lease.raft.tls.*)"}
	}
	if op == opRemoveServer && !n.hasMember(addr) {
		return &AddressError{Address: addr, Reason: "no member has the raft address " + addr}
	}
	if n.raft.State() == raft.Leader {
		f, err := n.changeMembers(op, addr, timeoutOf(ctx))
		if err == nil {
			err = f.Error()
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, raft.ErrNotLeader) {
			return n.applyError(err)
		}
	}
	index, err := n.forward(ctx, op, []byte(addr))
	if err != nil {
		return err
	}
	n.awaitApplied(ctx, index)
	return nil
}

// AddressError is a raft address that is not host:port.
type AddressError struct {
	Address, Reason string
}

func (e *AddressError) Error() string { return "lease: raft address: " + e.Reason }

// changeMembers starts a configuration change on the leader.
func (n *Node) changeMembers(op forwardOp, addr string, timeout time.Duration) (raft.IndexFuture, error) {
	if n.cfg.Mode != Cluster {
		return nil, ErrNotCluster
	}
	if err := checkAddress(addr); err != nil {
		return nil, &AddressError{Address: addr, Reason: err.Error()}
	}
	if op == opAddVoter && !n.cfg.TLS.Set() && !isLoopbackBind(addr) {
		return nil, &AddressError{Address: addr, Reason: addr + " is not a loopback address and raft runs without TLS here"}
	}
	if op == opAddVoter {
		return n.raft.AddVoter(raft.ServerID(addr), raft.ServerAddress(addr), 0, timeout), nil
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, n.applyError(err)
	}
	for _, s := range f.Configuration().Servers {
		if string(s.Address) == addr {
			return n.raft.RemoveServer(s.ID, 0, timeout), nil
		}
	}
	return nil, &AddressError{Address: addr, Reason: "no member has the raft address " + addr}
}

func (n *Node) hasMember(addr string) bool {
	for _, m := range n.Members() {
		if m.Address == addr {
			return true
		}
	}
	return false
}

// awaitApplied waits, briefly and within ctx, until this node applied
// index, so that its own Members shows a change the leader committed.
func (n *Node) awaitApplied(ctx context.Context, index uint64) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for n.raft.AppliedIndex() < index {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
