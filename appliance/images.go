package appliance

import (
	"context"
	"errors"
	"fmt"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	statev1 "github.com/siteboot/siteboot/gen/siteboot/state/v1"
	"github.com/siteboot/siteboot/imagecache"
	"github.com/siteboot/siteboot/site"
)

// Image is one image of the cache with where it comes from: the site spec,
// a hand addition, or both.
type Image struct {
	imagecache.Info
	InSpec      bool
	Added       bool
	Compression string // of a hand-added image: "", "gzip" or "zstd"
}

// ImageList is the cache's images with its capacity and use.
type ImageList struct {
	Images        []Image
	CapacityBytes uint64
	UsedBytes     uint64
}

// pullPoll bounds how long PullImages waits between two progress reports.
const pullPoll = 500 * time.Millisecond

// ApplySiteSpec validates and stores a site spec, replacing the previous one
// as a whole. It returns the stored spec and the digests it released.
func (a *Appliance) ApplySiteSpec(ctx context.Context, spec *sitev1.SiteSpec) (*sitev1.SiteSpec, [][]byte, error) {
	if err := a.started(); err != nil {
		return nil, nil, err
	}
	released, err := a.store.ApplySiteSpec(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	if err := a.waitSynced(ctx); err != nil {
		return nil, nil, err
	}
	return a.state.Spec(), released, nil
}

// SiteSpec returns the stored site spec.
func (a *Appliance) SiteSpec(context.Context) (*sitev1.SiteSpec, error) {
	if err := a.started(); err != nil {
		return nil, err
	}
	return a.state.Spec(), nil
}

// AddImage stores a hand-added image and returns it as the cache lists it.
func (a *Appliance) AddImage(ctx context.Context, want *statev1.ImageWant) (Image, error) {
	if err := a.started(); err != nil {
		return Image{}, err
	}
	w, err := a.store.AddImage(ctx, want)
	if err != nil {
		return Image{}, err
	}
	if err := a.waitSynced(ctx); err != nil {
		return Image{}, err
	}
	d := [32]byte(w.GetImage().GetSha256())
	if img, ok := a.image(d); ok {
		return img, nil
	}
	return Image{}, fmt.Errorf("image %x was stored but the cache does not list it", d)
}

// Images lists the cache's images.
func (a *Appliance) Images(context.Context) (ImageList, error) {
	if err := a.started(); err != nil {
		return ImageList{}, err
	}
	sec := a.cache.Section()
	out := ImageList{CapacityBytes: sec.GetCapacityBytes(), UsedBytes: sec.GetUsedBytes()}
	for _, in := range a.cache.Images() {
		out.Images = append(out.Images, a.describe(in))
	}
	return out, nil
}

// RemoveImage drops a hand-added image from the state and from the cache.
// Every refusal happens before anything changes.
func (a *Appliance) RemoveImage(ctx context.Context, digest []byte) error {
	if err := a.started(); err != nil {
		return err
	}
	if err := site.ValidateDigest("sha256", digest); err != nil {
		return err
	}
	d := [32]byte(digest)
	for _, ci := range a.state.Spec().GetCacheImages() {
		if [32]byte(ci.GetSha256()) == d {
			return &ImageInSpecError{Digest: d}
		}
	}
	if img, ok := a.image(d); ok && img.Pinned {
		return &ImagePinnedError{Digest: d}
	}
	removed, err := a.store.RemoveImage(ctx, digest)
	if err != nil {
		return err
	}
	if err := a.waitSynced(ctx); err != nil {
		return err
	}
	err = a.cache.Remove(d)
	switch {
	case errors.Is(err, imagecache.ErrNotFound) && removed.Found:
		return nil
	case errors.Is(err, imagecache.ErrNotFound):
		return &ImageNotFoundError{Digest: d}
	}
	return err
}

// PullImages starts (or retries) the pulls of the given images, every wanted
// image when digests is empty, and reports their progress to report: once,
// or until every one is READY when wait is set. It fails when one fails or
// is gone.
func (a *Appliance) PullImages(ctx context.Context, digests [][]byte, wait bool, report func([]Image) error) error {
	if err := a.started(); err != nil {
		return err
	}
	targets, err := a.pullTargets(digests)
	if err != nil {
		return err
	}
	for _, d := range targets {
		if err := a.cache.Retry(d); err != nil {
			return &ImageNotFoundError{Digest: d}
		}
	}
	for {
		done, err := a.pullProgress(ctx, targets, report)
		if done || err != nil || !wait {
			return err
		}
	}
}

func (a *Appliance) pullTargets(digests [][]byte) ([][32]byte, error) {
	var out [][32]byte
	for i, d := range digests {
		if err := site.ValidateDigest(fmt.Sprintf("sha256[%d]", i), d); err != nil {
			return nil, err
		}
		out = append(out, [32]byte(d))
	}
	if len(out) == 0 {
		for _, w := range a.state.WantedImages() {
			out = append(out, [32]byte(w.GetImage().GetSha256()))
		}
	}
	return out, nil
}

// pullProgress waits up to pullPoll for a change, then reports once. It
// says done when every image is ready, and fails when one failed or is gone.
func (a *Appliance) pullProgress(ctx context.Context, digests [][32]byte, report func([]Image) error) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, pullPoll)
	waitErr := a.cache.Wait(wctx, digests...)
	cancel()
	want := make(map[[32]byte]bool, len(digests))
	for _, d := range digests {
		want[d] = true
	}
	var imgs []Image
	for _, in := range a.cache.Images() {
		if want[in.SHA256] {
			imgs = append(imgs, a.describe(in))
		}
	}
	if err := report(imgs); err != nil {
		return true, err
	}
	var failed *imagecache.FailedError
	switch {
	case waitErr == nil:
		return true, nil
	case errors.As(waitErr, &failed):
		return true, &ImageFailedError{Digest: failed.SHA256, Reason: failed.Reason}
	case errors.Is(waitErr, imagecache.ErrNotFound):
		return true, waitErr
	case ctx.Err() != nil:
		return true, ctx.Err()
	}
	return false, nil
}

// image is the cache's image d, described.
func (a *Appliance) image(d [32]byte) (Image, bool) {
	for _, in := range a.cache.Images() {
		if in.SHA256 == d {
			return a.describe(in), true
		}
	}
	return Image{}, false
}

func (a *Appliance) describe(in imagecache.Info) Image {
	img := Image{Info: in}
	for _, ci := range a.state.Spec().GetCacheImages() {
		if [32]byte(ci.GetSha256()) == in.SHA256 {
			img.InSpec = true
		}
	}
	for _, w := range a.state.HandAddedImages() {
		if [32]byte(w.GetImage().GetSha256()) == in.SHA256 {
			img.Added, img.Compression = true, w.GetCompression()
		}
	}
	return img
}
