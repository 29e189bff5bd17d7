package appliance

import (
	"context"

	"github.com/siteboot/siteboot/lease"
)

// Members lists the raft members as this appliance knows them, and the
// local log index the list was read at: a follower answers too.
func (a *Appliance) Members(context.Context) ([]lease.Member, uint64, error) {
	if err := a.started(); err != nil {
		return nil, 0, err
	}
	return a.node.Members(), a.node.AppliedIndex(), nil
}

// AddMember adds a voter by its raft address (cluster mode; a follower
// forwards it to the leader) and returns the members after.
func (a *Appliance) AddMember(ctx context.Context, addr string) ([]lease.Member, error) {
	if err := a.started(); err != nil {
		return nil, err
	}
	if err := a.node.AddVoter(ctx, addr); err != nil {
		return nil, err
	}
	return a.node.Members(), nil
}

// RemoveMember removes the member with this raft address (cluster mode; a
// follower forwards it to the leader) and returns the members after.
func (a *Appliance) RemoveMember(ctx context.Context, addr string) ([]lease.Member, error) {
	if err := a.started(); err != nil {
		return nil, err
	}
	if err := a.node.RemoveServer(ctx, addr); err != nil {
		return nil, err
	}
	return a.node.Members(), nil
}
