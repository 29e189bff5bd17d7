package admin

import (
	"context"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/lease"
)

// ListMembers implements siteboot.v1.SiteBoot: read locally.
func (s *Server) ListMembers(ctx context.Context, _ *sitebootv1.ListMembersRequest) (*sitebootv1.ListMembersResponse, error) {
	members, applied, err := s.core.Members(ctx)
	return &sitebootv1.ListMembersResponse{Members: membersAPI(members), AppliedIndex: applied}, grpcError(err)
}

// AddMember implements siteboot.v1.SiteBoot: a write, forwarded to the
// leader by a follower.
func (s *Server) AddMember(ctx context.Context, req *sitebootv1.AddMemberRequest) (*sitebootv1.AddMemberResponse, error) {
	members, err := s.core.AddMember(ctx, req.GetAddress())
	return &sitebootv1.AddMemberResponse{Members: membersAPI(members)}, grpcError(err)
}

// RemoveMember implements siteboot.v1.SiteBoot: a write, forwarded to the
// leader by a follower.
func (s *Server) RemoveMember(ctx context.Context, req *sitebootv1.RemoveMemberRequest) (*sitebootv1.RemoveMemberResponse, error) {
	members, err := s.core.RemoveMember(ctx, req.GetAddress())
	return &sitebootv1.RemoveMemberResponse{Members: membersAPI(members)}, grpcError(err)
}

func membersAPI(ms []lease.Member) []*sitebootv1.Member {
	out := make([]*sitebootv1.Member, len(ms))
	for i, m := range ms {
		out[i] = &sitebootv1.Member{ServerId: m.ServerID, Address: m.Address, Suffrage: m.Suffrage, Leader: m.Leader,
			NodeId: m.NodeID, KeyId: m.KeyID}
	}
	return out
}
