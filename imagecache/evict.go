package imagecache

import (
	"bytes"
	"slices"
)

func (c *Cache) pinnedLocked(d [32]byte) bool {
	return c.cfg.Pins != nil && c.cfg.Pins.Pinned(d)
}

// lruLocked lists the images eviction may take, least recently used first:
// ready, neither listed by SetWanted nor added, not pinned.
func (c *Cache) lruLocked() []*entry {
	var out []*entry
	for _, e := range c.entries {
		if e.state == StateReady && !e.wanted() && !c.pinnedLocked(e.digest) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *entry) int {
		if r := a.lastUsed.Compare(b.lastUsed); r != 0 {
			return r
		}
		return bytes.Compare(a.digest[:], b.digest[:])
	})
	return out
}

// usedLocked is the bytes of blobs on disk, and the part of it already
// being evicted.
func (c *Cache) usedLocked() (used, leaving int64) {
	for _, e := range c.entries {
		switch e.state {
		case StateReady:
			used += e.size
		case StateEvicting:
			used += e.size
			leaving += e.size
		}
	}
	return used, leaving
}

// pullingLocked is what pulls other than skip have announced: their total
// sizes and what they still have to write.
func (c *Cache) pullingLocked(skip *entry) (total, remaining int64) {
	for _, e := range c.entries {
		if e == skip || e.state != StatePulling {
			continue
		}
		if t := e.total.Load(); t > 0 {
			total += t
			remaining += max(t-e.done.Load(), 0)
		}
	}
	return total, remaining
}

// enforceCapacityLocked evicts released images until the blobs that stay
// fit the capacity.
func (c *Cache) enforceCapacityLocked() {
	if c.cfg.Capacity == 0 {
		return
	}
	used, leaving := c.usedLocked()
	staying := used - leaving
	for _, e := range c.lruLocked() {
		if staying <= c.cfg.Capacity {
			return
		}
		staying -= e.size
		c.evictLocked(e)
	}
}

// evictLocked deletes a released image now, or marks it EVICTING until its
// last reader finishes. It reports whether the space was freed now.
func (c *Cache) evictLocked(e *entry) bool {
	c.dirty = true
	if e.readers > 0 {
		c.log.Info("imagecache: evicting after readers finish", "sha256", hexOf(e.digest), "size", e.size, "readers", e.readers)
		e.state = StateEvicting
		return false
	}
	c.log.Info("imagecache: evicted", "sha256", hexOf(e.digest), "size", e.size)
	c.removeBlob(e.digest)
	delete(c.entries, e.digest)
	c.m.evictions.Inc()
	return true
}

// admit makes room for a pull of total bytes of which off are on disk: it
// evicts released images for the capacity and for the disk space the pull
// needs, and fails (for good) when that is not enough.
func (c *Cache) admit(e *entry, total, off int64) error {
	free, err := freeBytes(c.ingestDir)
	if err != nil {
		return permanent(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.Capacity > 0 && total > c.cfg.Capacity {
		return permanentf("image of %d bytes is larger than the cache capacity of %d bytes", total, c.cfg.Capacity)
	}
	others, othersLeft := c.pullingLocked(e)
	diskShort := total - off + othersLeft + c.cfg.MinFree - free
	capShort := int64(0)
	if c.cfg.Capacity > 0 {
		used, leaving := c.usedLocked()
		capShort = used - leaving + others + total - c.cfg.Capacity
	}
	for _, v := range c.lruLocked() {
		if diskShort <= 0 && capShort <= 0 {
			break
		}
		capShort -= v.size
		if c.evictLocked(v) {
			diskShort -= v.size
		}
	}
	if capShort > 0 {
		return permanentf("cache full: %d more bytes needed and no released image left to evict", capShort)
	}
	if diskShort > 0 {
		return permanentf("not enough disk space: %d bytes needed, %d available (keeping %d free)",
			total-off+othersLeft, free, c.cfg.MinFree)
	}
	return nil
}
