package admin

import (
	"context"

	"github.com/siteboot/siteboot/appliance"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"google.golang.org/grpc"
)

// Each RPC hands its request to the core and maps the result: the rules
// live in package appliance, the codes in codeTable.

// PrepareRamdisk implements siteboot.v1.SiteBoot.
func (s *Server) PrepareRamdisk(ctx context.Context, req *sitebootv1.PrepareRamdiskRequest) (*sitebootv1.PrepareRamdiskResponse, error) {
	stored, err := s.core.PrepareRamdisk(ctx, req.GetNodeId(), req.GetEntries())
	return &sitebootv1.PrepareRamdiskResponse{Entries: entriesAPI(stored)}, grpcError(err)
}

// CleanUp implements siteboot.v1.SiteBoot.
func (s *Server) CleanUp(ctx context.Context, req *sitev1.BootCleanUpRequest) (*sitebootv1.CleanUpResponse, error) {
	removed, err := s.core.CleanUp(ctx, req)
	return &sitebootv1.CleanUpResponse{RemovedMacs: removed}, grpcError(err)
}

// ListEntries implements siteboot.v1.SiteBoot.
func (s *Server) ListEntries(ctx context.Context, req *sitebootv1.ListEntriesRequest) (*sitebootv1.ListEntriesResponse, error) {
	entries, err := s.core.Entries(ctx, req.GetNodeId())
	return &sitebootv1.ListEntriesResponse{Entries: entriesAPI(entries)}, grpcError(err)
}

// GetStatus implements siteboot.v1.SiteBoot.
func (s *Server) GetStatus(ctx context.Context, _ *sitebootv1.GetStatusRequest) (*sitebootv1.GetStatusResponse, error) {
	st, err := s.core.Status(ctx)
	return statusAPI(st), grpcError(err)
}

// ListDiscovered implements siteboot.v1.SiteBoot.
func (s *Server) ListDiscovered(ctx context.Context, _ *sitebootv1.ListDiscoveredRequest) (*sitebootv1.ListDiscoveredResponse, error) {
	machines, err := s.core.Discovered(ctx)
	return &sitebootv1.ListDiscoveredResponse{Machines: machines}, grpcError(err)
}

// RenderScript implements siteboot.v1.SiteBoot: secrets redacted.
func (s *Server) RenderScript(ctx context.Context, req *sitev1.IpxeScriptRequest) (*sitev1.IpxeScript, error) {
	script, err := s.core.RenderScript(ctx, req, false)
	return script, grpcError(err)
}

// PreviewScript implements siteboot.v1.SiteBoot: secrets for root only.
func (s *Server) PreviewScript(ctx context.Context, req *sitebootv1.PreviewScriptRequest) (*sitev1.IpxeScript, error) {
	if req.GetRevealSecrets() {
		if err := requireRoot(ctx); err != nil {
			return nil, err
		}
	}
	script, err := s.core.RenderScript(ctx, req.GetRequest(), req.GetRevealSecrets())
	return script, grpcError(err)
}

// ApplySiteSpec implements siteboot.v1.SiteBoot.
func (s *Server) ApplySiteSpec(ctx context.Context, req *sitebootv1.ApplySiteSpecRequest) (*sitebootv1.ApplySiteSpecResponse, error) {
	spec, released, err := s.core.ApplySiteSpec(ctx, req.GetSpec())
	return &sitebootv1.ApplySiteSpecResponse{Spec: spec, Released: released}, grpcError(err)
}

// GetSiteSpec implements siteboot.v1.SiteBoot.
func (s *Server) GetSiteSpec(ctx context.Context, _ *sitebootv1.GetSiteSpecRequest) (*sitebootv1.GetSiteSpecResponse, error) {
	spec, err := s.core.SiteSpec(ctx)
	return &sitebootv1.GetSiteSpecResponse{Spec: spec}, grpcError(err)
}

// AddImage implements siteboot.v1.SiteBoot.
func (s *Server) AddImage(ctx context.Context, req *sitebootv1.AddImageRequest) (*sitebootv1.AddImageResponse, error) {
	img, err := s.core.AddImage(ctx, &statev1.ImageWant{Image: req.GetImage(), Compression: req.GetCompression(), SourceSha256: req.GetSourceSha256()})
	return &sitebootv1.AddImageResponse{Image: imageAPI(img)}, grpcError(err)
}

// ListImages implements siteboot.v1.SiteBoot.
func (s *Server) ListImages(ctx context.Context, _ *sitebootv1.ListImagesRequest) (*sitebootv1.ListImagesResponse, error) {
	list, err := s.core.Images(ctx)
	return &sitebootv1.ListImagesResponse{Images: imagesAPI(list.Images), CapacityBytes: list.CapacityBytes, UsedBytes: list.UsedBytes}, grpcError(err)
}

// RemoveImage implements siteboot.v1.SiteBoot.
func (s *Server) RemoveImage(ctx context.Context, req *sitebootv1.RemoveImageRequest) (*sitebootv1.RemoveImageResponse, error) {
	return &sitebootv1.RemoveImageResponse{}, grpcError(s.core.RemoveImage(ctx, req.GetSha256()))
}

// PullImages implements siteboot.v1.SiteBoot.
func (s *Server) PullImages(req *sitebootv1.PullImagesRequest, stream grpc.ServerStreamingServer[sitebootv1.PullImagesResponse]) error {
	return grpcError(s.core.PullImages(stream.Context(), req.GetSha256(), req.GetWait(), func(imgs []appliance.Image) error {
		return stream.Send(&sitebootv1.PullImagesResponse{Images: imagesAPI(imgs)})
	}))
}
