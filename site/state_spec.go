package site

import (
	"bytes"
	"fmt"
	"slices"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
)

// SpecResult is what applying a site spec changed.
type SpecResult struct {
	// Released are the digests of images the new spec no longer lists (and
	// no hand-added image wants): the cache may evict them.
	Released [][]byte
}

func (s *State) applySpec(spec *sitev1.SiteSpec) any {
	before := s.wantedLocked()
	s.spec = spec
	after := s.wantedLocked()
	res := &SpecResult{}
	for d := range before {
		if _, still := after[d]; !still {
			res.Released = append(res.Released, []byte(d))
		}
	}
	slices.SortFunc(res.Released, bytes.Compare)
	return res
}

func (s *State) addImage(w *statev1.ImageWant) any {
	key := string(w.GetImage().GetSha256())
	if _, held := s.images[key]; !held && len(s.images) >= MaxImages {
		return &LimitError{Reason: fmt.Sprintf("the site holds %d hand-added images, the limit", MaxImages)}
	}
	s.images[key] = w
	return w
}

// ImageRemoved is what removing a hand-added image did.
type ImageRemoved struct {
	// StillWanted is true when the site spec still lists the digest.
	StillWanted bool
	// Found is false when no hand-added image had the digest.
	Found bool
}

func (s *State) removeImage(digest []byte) any {
	_, found := s.images[string(digest)]
	delete(s.images, string(digest))
	_, still := s.wantedLocked()[string(digest)]
	return &ImageRemoved{Found: found, StillWanted: still}
}

// wantedLocked maps every wanted digest to its want; a hand-added image
// wins over the spec's entry for the same digest (it may carry how to
// decompress).
func (s *State) wantedLocked() map[string]*statev1.ImageWant {
	out := make(map[string]*statev1.ImageWant, len(s.images)+len(s.spec.GetCacheImages()))
	for _, ci := range s.spec.GetCacheImages() {
		out[string(ci.GetSha256())] = &statev1.ImageWant{Image: ci}
	}
	for d, w := range s.images {
		out[d] = w
	}
	return out
}

func (s *State) imageList() []*statev1.ImageWant {
	out := make([]*statev1.ImageWant, 0, len(s.images))
	for _, w := range s.images {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b *statev1.ImageWant) int {
		return bytes.Compare(a.GetImage().GetSha256(), b.GetImage().GetSha256())
	})
	return out
}

// WantedImages is every image the cache should hold: the site spec's
// cache_images and the hand-added ones, ordered by digest.
func (s *State) WantedImages() []*statev1.ImageWant {
	s.mu.RLock()
	m := s.wantedLocked()
	s.mu.RUnlock()
	out := make([]*statev1.ImageWant, 0, len(m))
	for _, w := range m {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b *statev1.ImageWant) int {
		return bytes.Compare(a.GetImage().GetSha256(), b.GetImage().GetSha256())
	})
	return out
}

// HandAddedImages are the images added with AddImage, ordered by digest.
func (s *State) HandAddedImages() []*statev1.ImageWant {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.imageList()
}

// Spec is the site spec last applied (an empty spec before the first).
func (s *State) Spec() *sitev1.SiteSpec {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.spec == nil {
		return &sitev1.SiteSpec{}
	}
	return s.spec
}

// SanbootDigests are the digests stored entries boot by sanboot: the cache
// must not evict them.
func (s *State) SanbootDigests() map[[32]byte]struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[[32]byte]struct{})
	for _, se := range s.byMAC {
		if d := se.GetEntry().GetSanbootSha256(); len(d) == 32 {
			out[[32]byte(d)] = struct{}{}
		}
	}
	return out
}
