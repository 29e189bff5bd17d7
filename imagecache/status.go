package imagecache

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	"github.com/siteboot/siteboot/internal/redact"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Ready reports whether digest is verified and served. It is cheap enough
// for every PrepareRamdisk.
func (c *Cache) Ready(digest [32]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[digest]
	return e != nil && e.state == StateReady
}

// Images lists every image, sorted by digest.
func (c *Cache) Images() []Info {
	c.mu.Lock()
	out := make([]Info, 0, len(c.entries))
	for _, e := range c.entries {
		out = append(out, c.infoLocked(e))
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Info) int { return bytes.Compare(a.SHA256[:], b.SHA256[:]) })
	return out
}

func (c *Cache) infoLocked(e *entry) Info {
	in := Info{
		SHA256: e.digest, URL: redact.URL(e.want.URL), ImageID: e.want.ImageID, Format: e.want.Format,
		State: e.state, Size: e.size, LastUsed: e.lastUsed, Reason: e.reason,
		Listed: e.listed, Added: e.added, Pinned: c.pinnedLocked(e.digest), Readers: e.readers,
	}
	if e.want.URL == "" {
		in.URL = ""
	}
	switch e.state {
	case StateQueued, StatePulling:
		in.Done, in.Size = e.progress.Done.Load(), max(e.progress.Total.Load(), 0)
	case StateVerifying:
		in.Done = e.progress.Done.Load()
	}
	return in
}

// Wait returns nil when every digest is ready, a *FailedError as soon as
// one has failed, ErrNotFound for one the cache does not hold or want, or
// ctx's error. Progress is in Images while it waits.
func (c *Cache) Wait(ctx context.Context, digests ...[32]byte) error {
	for {
		c.mu.Lock()
		done, err := c.waitStateLocked(digests)
		ch := c.changed
		c.mu.Unlock()
		if done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("imagecache: wait: %w", ctx.Err())
		case <-ch:
		}
	}
}

func (c *Cache) waitStateLocked(digests [][32]byte) (bool, error) {
	pending := false
	for _, d := range digests {
		e := c.entries[d]
		switch {
		case e == nil || e.state == StateEvicting:
			return true, fmt.Errorf("%w: %s", ErrNotFound, hexOf(d))
		case e.state == StateFailed:
			return true, &FailedError{SHA256: d, Reason: e.reason}
		case e.state != StateReady:
			pending = true
		}
	}
	return !pending, nil
}

// maxSectionImages bounds ImagesSection.images (protocol reference).
const maxSectionImages = 1000

// Section is the contract's view of the cache (ImagesSection): the at most
// 1,000 most recently used images, sorted by sha256, last_used truncated to
// the hour, ref without query or user info, and the capacity (0 when
// unbounded) and use. Failed images hold nothing and are left out.
func (c *Cache) Section() *agentv1.ImagesSection {
	c.mu.Lock()
	list := make([]*agentv1.CachedImage, 0, len(c.entries))
	used := make(map[*agentv1.CachedImage]time.Time, len(c.entries))
	for _, e := range c.entries {
		if e.state == StateFailed {
			continue
		}
		ci := c.cachedImageLocked(e)
		list = append(list, ci)
		used[ci] = e.lastUsed
	}
	usedBytes, _ := c.usedLocked()
	c.mu.Unlock()
	slices.SortFunc(list, func(a, b *agentv1.CachedImage) int {
		if r := used[b].Compare(used[a]); r != 0 {
			return r
		}
		return bytes.Compare(a.GetSha256(), b.GetSha256())
	})
	list = list[:min(len(list), maxSectionImages)]
	slices.SortFunc(list, func(a, b *agentv1.CachedImage) int { return bytes.Compare(a.GetSha256(), b.GetSha256()) })
	return &agentv1.ImagesSection{Images: list, CapacityBytes: uint64(c.cfg.Capacity), UsedBytes: uint64(usedBytes)}
}

func (c *Cache) cachedImageLocked(e *entry) *agentv1.CachedImage {
	ci := &agentv1.CachedImage{
		ImageId: e.want.ImageID, Ref: bareURL(e.want.URL), Sha256: bytes.Clone(e.digest[:]),
		SizeBytes: uint64(e.size), State: e.state.Proto(),
	}
	if e.state == StateQueued || e.state == StatePulling {
		ci.SizeBytes = uint64(max(e.progress.Total.Load(), 0))
	}
	if !e.lastUsed.IsZero() {
		ci.LastUsed = timestamppb.New(e.lastUsed.UTC().Truncate(time.Hour))
	}
	return ci
}
