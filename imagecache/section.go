package imagecache

import (
	"bytes"
	"slices"
	"time"

	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

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
		ci.SizeBytes = uint64(max(e.total.Load(), 0))
	}
	if !e.lastUsed.IsZero() {
		ci.LastUsed = timestamppb.New(e.lastUsed.UTC().Truncate(time.Hour))
	}
	return ci
}
