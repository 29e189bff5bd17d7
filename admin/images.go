package admin

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/imagecache"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Cache is the local image cache (imagecache.Cache).
type Cache interface {
	Images() []imagecache.Info
	Section() *agentv1.ImagesSection
	Remove(digest [32]byte) error
	Retry(digest [32]byte) error
}

// pullPoll bounds how long PullImages waits between two progress messages.
const pullPoll = 500 * time.Millisecond

func (s *Server) cache() (Cache, error) {
	if s.cfg.Cache == nil {
		return nil, status.Error(codes.Unavailable, "the image cache is not running on this appliance")
	}
	return s.cfg.Cache, nil
}

// syncImages hands the replicated wanted images to the local cache now, so
// a call returns with the cache already knowing what it changed.
func (s *Server) syncImages() error {
	if s.cfg.SyncImages == nil {
		return nil
	}
	return s.cfg.SyncImages()
}

// ApplySiteSpec implements siteboot.v1.SiteBoot.
func (s *Server) ApplySiteSpec(ctx context.Context, req *sitebootv1.ApplySiteSpecRequest) (*sitebootv1.ApplySiteSpecResponse, error) {
	released, err := s.cfg.Store.ApplySiteSpec(ctx, req.GetSpec())
	if err != nil {
		return nil, err
	}
	if err := s.syncImages(); err != nil {
		return nil, err
	}
	return &sitebootv1.ApplySiteSpecResponse{Spec: s.cfg.Store.State().Spec(), Released: released}, nil
}

// GetSiteSpec implements siteboot.v1.SiteBoot.
func (s *Server) GetSiteSpec(ctx context.Context, _ *sitebootv1.GetSiteSpecRequest) (*sitebootv1.GetSiteSpecResponse, error) {
	return &sitebootv1.GetSiteSpecResponse{Spec: s.cfg.Store.State().Spec()}, nil
}

// AddImage implements siteboot.v1.SiteBoot.
func (s *Server) AddImage(ctx context.Context, req *sitebootv1.AddImageRequest) (*sitebootv1.AddImageResponse, error) {
	c, err := s.cache()
	if err != nil {
		return nil, err
	}
	w, err := s.cfg.Store.AddImage(ctx, &statev1.ImageWant{Image: req.GetImage(), Compression: req.GetCompression(), SourceSha256: req.GetSourceSha256()})
	if err != nil {
		return nil, err
	}
	if err := s.syncImages(); err != nil {
		return nil, err
	}
	d := [32]byte(w.GetImage().GetSha256())
	for _, in := range c.Images() {
		if in.SHA256 == d {
			return &sitebootv1.AddImageResponse{Image: s.imageAPI(in)}, nil
		}
	}
	return nil, status.Errorf(codes.Internal, "image %x was stored but the cache does not list it", d)
}

// ListImages implements siteboot.v1.SiteBoot.
func (s *Server) ListImages(ctx context.Context, _ *sitebootv1.ListImagesRequest) (*sitebootv1.ListImagesResponse, error) {
	c, err := s.cache()
	if err != nil {
		return nil, err
	}
	sec := c.Section()
	resp := &sitebootv1.ListImagesResponse{CapacityBytes: sec.GetCapacityBytes(), UsedBytes: sec.GetUsedBytes()}
	for _, in := range c.Images() {
		resp.Images = append(resp.Images, s.imageAPI(in))
	}
	return resp, nil
}

// RemoveImage implements siteboot.v1.SiteBoot. Every refusal happens
// before anything changes.
func (s *Server) RemoveImage(ctx context.Context, req *sitebootv1.RemoveImageRequest) (*sitebootv1.RemoveImageResponse, error) {
	c, err := s.cache()
	if err != nil {
		return nil, err
	}
	if err := site.ValidateDigest("sha256", req.GetSha256()); err != nil {
		return nil, err
	}
	d := [32]byte(req.GetSha256())
	for _, ci := range s.cfg.Store.State().Spec().GetCacheImages() {
		if [32]byte(ci.GetSha256()) == d {
			return nil, status.Errorf(codes.FailedPrecondition, "image %x is listed by the site spec: apply a spec without it", d)
		}
	}
	for _, in := range c.Images() {
		if in.SHA256 == d && in.Pinned {
			return nil, status.Errorf(codes.FailedPrecondition, "image %x is pinned: an entry's sanboot_sha256 or the ramdisk profile needs it", d)
		}
	}
	removed, err := s.cfg.Store.RemoveImage(ctx, req.GetSha256())
	if err != nil {
		return nil, err
	}
	if err := s.syncImages(); err != nil {
		return nil, err
	}
	err = c.Remove(d)
	switch {
	case errors.Is(err, imagecache.ErrNotFound) && removed.Found:
		return &sitebootv1.RemoveImageResponse{}, nil
	case errors.Is(err, imagecache.ErrNotFound):
		return nil, status.Errorf(codes.NotFound, "image %x: the cache neither holds nor wants it", d)
	case errors.Is(err, imagecache.ErrPinned), errors.Is(err, imagecache.ErrWanted):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case err != nil:
		return nil, err
	}
	return &sitebootv1.RemoveImageResponse{}, nil
}

// PullImages implements siteboot.v1.SiteBoot.
func (s *Server) PullImages(req *sitebootv1.PullImagesRequest, stream grpc.ServerStreamingServer[sitebootv1.PullImagesResponse]) error {
	c, err := s.cache()
	if err != nil {
		return err
	}
	digests, err := s.pullTargets(req)
	if err != nil {
		return Status(err)
	}
	for _, d := range digests {
		if err := c.Retry(d); err != nil {
			return status.Error(codes.NotFound, err.Error())
		}
	}
	for {
		done, err := s.pullProgress(stream, c, digests)
		if done || err != nil || !req.GetWait() {
			return err
		}
	}
}

func (s *Server) pullTargets(req *sitebootv1.PullImagesRequest) ([][32]byte, error) {
	var out [][32]byte
	for i, d := range req.GetSha256() {
		if err := site.ValidateDigest(fmt.Sprintf("sha256[%d]", i), d); err != nil {
			return nil, err
		}
		out = append(out, [32]byte(d))
	}
	if len(out) == 0 {
		for _, w := range s.cfg.Store.State().WantedImages() {
			out = append(out, [32]byte(w.GetImage().GetSha256()))
		}
	}
	return out, nil
}

// pullProgress waits up to pullPoll for a change, then sends one snapshot.
// It reports done when every image is ready, and an error when one failed
// or is gone.
func (s *Server) pullProgress(stream grpc.ServerStreamingServer[sitebootv1.PullImagesResponse], c Cache, digests [][32]byte) (bool, error) {
	ctx, cancel := context.WithTimeout(stream.Context(), pullPoll)
	waitErr := waitImages(ctx, c, digests)
	cancel()
	want := make(map[[32]byte]bool, len(digests))
	for _, d := range digests {
		want[d] = true
	}
	resp := &sitebootv1.PullImagesResponse{}
	for _, in := range c.Images() {
		if want[in.SHA256] {
			resp.Images = append(resp.Images, s.imageAPI(in))
		}
	}
	if err := stream.Send(resp); err != nil {
		return true, err
	}
	var failed *imagecache.FailedError
	switch {
	case waitErr == nil:
		return true, nil
	case errors.As(waitErr, &failed):
		return true, status.Errorf(codes.FailedPrecondition, "image %s failed: %s", hex.EncodeToString(failed.SHA256[:]), failed.Reason)
	case errors.Is(waitErr, imagecache.ErrNotFound):
		return true, status.Error(codes.NotFound, waitErr.Error())
	case stream.Context().Err() != nil:
		return true, Status(stream.Context().Err())
	}
	return false, nil
}

// waitImages is imagecache.Cache.Wait when the cache offers it.
func waitImages(ctx context.Context, c Cache, digests [][32]byte) error {
	if w, ok := c.(interface {
		Wait(context.Context, ...[32]byte) error
	}); ok {
		return w.Wait(ctx, digests...)
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *Server) imageAPI(in imagecache.Info) *sitebootv1.Image {
	img := &sitebootv1.Image{
		Sha256: append([]byte(nil), in.SHA256[:]...), Url: in.URL, Format: in.Format,
		State: in.State.String(), ContractState: in.State.Proto(),
		SizeBytes: uint64(max(in.Size, 0)), DoneBytes: uint64(max(in.Done, 0)), Reason: in.Reason,
		Pinned: in.Pinned, Readers: uint32(max(in.Readers, 0)),
	}
	if !in.LastUsed.IsZero() {
		img.LastUsed = timestamppb.New(in.LastUsed)
	}
	st := s.cfg.Store.State()
	for _, ci := range st.Spec().GetCacheImages() {
		if [32]byte(ci.GetSha256()) == in.SHA256 {
			img.InSpec = true
		}
	}
	for _, w := range st.HandAddedImages() {
		if [32]byte(w.GetImage().GetSha256()) == in.SHA256 {
			img.Added, img.Compression = true, w.GetCompression()
		}
	}
	return img
}
