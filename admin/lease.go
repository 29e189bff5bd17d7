package admin

import (
	"context"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/lease"
)

// GetLease implements siteboot.v1.SiteBoot.
func (s *Server) GetLease(ctx context.Context, _ *sitebootv1.GetLeaseRequest) (*sitebootv1.LeaseStatus, error) {
	st, err := s.core.Lease(ctx)
	return leaseStatusAPI(st), grpcError(err)
}

// UpdateLease implements siteboot.v1.SiteBoot: a write, admitted like every
// other call (root or the admin group on the socket, a verified client
// certificate over TCP).
func (s *Server) UpdateLease(ctx context.Context, req *sitebootv1.UpdateLeaseRequest) (*sitebootv1.UpdateLeaseResponse, error) {
	st, err := s.core.UpdateLease(ctx, req.GetLease())
	if err != nil {
		return nil, grpcError(err)
	}
	return &sitebootv1.UpdateLeaseResponse{Status: leaseStatusAPI(st)}, nil
}

// leaseStatusAPI is a lease.Status as the API reports it.
func leaseStatusAPI(st lease.Status) *sitebootv1.LeaseStatus {
	return &sitebootv1.LeaseStatus{
		Mode: string(st.Mode), Active: st.Active, Epoch: st.Epoch, TtlMs: uint32(st.TTL.Milliseconds()),
		Holder: st.Holder, ValidUntil: timestamp(st.ValidUntil), FencedReason: st.FencedReason,
		RaftState: st.RaftState, AppliedIndex: st.AppliedIndex, Leader: st.Leader, FenceEvents: st.FenceEvents,
		Members: membersAPI(st.Members),
	}
}
