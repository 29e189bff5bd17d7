package site

import (
	"context"
	"encoding/hex"
	"fmt"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/internal/redact"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ApplySiteSpec validates and stores a site spec, replacing the previous
// one as a whole. It returns the digests the new spec released.
func (s *Store) ApplySiteSpec(ctx context.Context, spec *sitev1.SiteSpec) ([][]byte, error) {
	valid, err := ValidateSiteSpec(spec)
	if err != nil {
		return nil, err
	}
	res, err := s.apply(ctx, &statev1.SiteCommand{
		At: timestamppb.New(s.now()),
		Op: &statev1.SiteCommand_ApplySiteSpec{ApplySiteSpec: &statev1.ApplySiteSpec{Spec: valid}},
	})
	if err != nil {
		return nil, err
	}
	released := res.(*SpecResult).Released
	s.log.Info("site spec applied", "cache_images", len(valid.GetCacheImages()),
		"proxy_targets", len(valid.GetProxyTargets()), "released", hexList(released))
	return released, nil
}

// AddImage stores a hand-added image the cache should hold.
func (s *Store) AddImage(ctx context.Context, w *statev1.ImageWant) (*statev1.ImageWant, error) {
	if err := ValidateImageWant(w); err != nil {
		return nil, err
	}
	want := &statev1.ImageWant{Image: w.GetImage(), SourceSha256: w.GetSourceSha256(), Compression: w.GetCompression(),
		AddedAt: timestamppb.New(s.now())}
	res, err := s.apply(ctx, &statev1.SiteCommand{
		At: want.GetAddedAt(),
		Op: &statev1.SiteCommand_AddImage{AddImage: &statev1.AddImage{Want: want}},
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("image added", "sha256", hex.EncodeToString(want.GetImage().GetSha256()), "url", redact.URL(want.GetImage().GetUrl()))
	return res.(*statev1.ImageWant), nil
}

// RemoveImage drops a hand-added image from what the cache should hold.
func (s *Store) RemoveImage(ctx context.Context, digest []byte) (*ImageRemoved, error) {
	if err := ValidateDigest("sha256", digest); err != nil {
		return nil, err
	}
	res, err := s.apply(ctx, &statev1.SiteCommand{
		At: timestamppb.New(s.now()),
		Op: &statev1.SiteCommand_RemoveImage{RemoveImage: &statev1.RemoveImage{Sha256: digest}},
	})
	if err != nil {
		return nil, err
	}
	return res.(*ImageRemoved), nil
}

func hexList(ds [][]byte) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%x", d)
	}
	return out
}
