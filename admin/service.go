package admin

import (
	"context"
	"errors"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/ipxe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// PrepareRamdisk implements siteboot.v1.SiteBoot.
func (s *Server) PrepareRamdisk(ctx context.Context, req *sitebootv1.PrepareRamdiskRequest) (*sitebootv1.PrepareRamdiskResponse, error) {
	stored, err := s.cfg.Store.PrepareRamdisk(ctx, req.GetNodeId(), req.GetEntries())
	if err != nil {
		return nil, err
	}
	return &sitebootv1.PrepareRamdiskResponse{Entries: s.toAPI(stored)}, nil
}

// CleanUp implements siteboot.v1.SiteBoot.
func (s *Server) CleanUp(ctx context.Context, req *sitev1.BootCleanUpRequest) (*sitebootv1.CleanUpResponse, error) {
	removed, err := s.cfg.Store.CleanUp(ctx, req)
	if err != nil {
		return nil, err
	}
	return &sitebootv1.CleanUpResponse{RemovedMacs: removed}, nil
}

// ListEntries implements siteboot.v1.SiteBoot.
func (s *Server) ListEntries(ctx context.Context, req *sitebootv1.ListEntriesRequest) (*sitebootv1.ListEntriesResponse, error) {
	return &sitebootv1.ListEntriesResponse{Entries: s.toAPI(s.cfg.Store.State().List(req.GetNodeId()))}, nil
}

// GetStatus implements siteboot.v1.SiteBoot.
func (s *Server) GetStatus(ctx context.Context, _ *sitebootv1.GetStatusRequest) (*sitebootv1.GetStatusResponse, error) {
	entries, live, nodes := s.cfg.Store.State().Counts(s.cfg.Now())
	st := &sitebootv1.GetStatusResponse{
		SiteId:       s.cfg.SiteID,
		NodeId:       s.cfg.NodeID,
		Version:      s.cfg.Version,
		Entries:      uint32(entries),
		LiveEntries:  uint32(live),
		Nodes:        uint32(nodes),
		Lease:        s.cfg.Lease.LeaseState(),
		LeaseMode:    s.cfg.Lease.Mode(),
		RaftState:    s.cfg.Lease.RaftState(),
		AppliedIndex: s.cfg.Lease.AppliedIndex(),
		StartedAt:    timestamppb.New(s.cfg.StartedAt),
	}
	s.bootStatus(st)
	return st, nil
}

func (s *Server) bootStatus(st *sitebootv1.GetStatusResponse) {
	if b := s.cfg.BootFiles; b != nil {
		st.BootFilesDir = b.Dir()
		for _, f := range b.Files() {
			st.BootFiles = append(st.BootFiles, &sitebootv1.BootFile{Name: f.Name, Arches: f.Arches, Size: uint64(f.Size), Sha256: f.SHA256[:]})
		}
	}
	if d := s.cfg.Discovered; d != nil {
		st.Discovered = uint32(d.Count())
	}
	if k := s.cfg.Keys; k != nil {
		st.NodeKeyId, st.NodePublicKeyPem = k.KID(), string(k.PublicKeyPEM())
	}
	if s.cfg.Listeners != nil {
		st.Listeners = s.cfg.Listeners()
	}
	if s.cfg.Cache != nil {
		st.Images = s.cfg.Cache.Section()
	}
}

// ListDiscovered implements siteboot.v1.SiteBoot.
func (s *Server) ListDiscovered(ctx context.Context, _ *sitebootv1.ListDiscoveredRequest) (*sitebootv1.ListDiscoveredResponse, error) {
	if s.cfg.Discovered == nil {
		return nil, status.Error(codes.Unavailable, "discovery is not running on this appliance")
	}
	return &sitebootv1.ListDiscoveredResponse{Machines: s.cfg.Discovered.List()}, nil
}

// RenderScript implements siteboot.v1.SiteBoot. An unknown machine gets the
// script it would be served, as /ipxe does, but is not recorded.
func (s *Server) RenderScript(ctx context.Context, req *sitev1.IpxeScriptRequest) (*sitev1.IpxeScript, error) {
	if s.cfg.Scripts == nil {
		return nil, status.Error(codes.Unavailable, "iPXE scripts are not served by this appliance")
	}
	script, err := s.cfg.Scripts.Render(ctx, req)
	var unknown *ipxe.UnknownMachineError
	if errors.As(err, &unknown) {
		return unknown.Script, nil
	}
	return script, err
}

func (s *Server) toAPI(stored []*statev1.StoredEntry) []*sitebootv1.Entry {
	now := s.cfg.Now()
	out := make([]*sitebootv1.Entry, 0, len(stored))
	for _, se := range stored {
		out = append(out, &sitebootv1.Entry{
			NodeId:    se.GetNodeId(),
			Entry:     se.GetEntry(),
			CreatedAt: se.GetCreatedAt(),
			Live:      se.GetEntry().GetNotAfter().AsTime().After(now),
		})
	}
	return out
}
