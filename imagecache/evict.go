package imagecache

import (
	"bytes"
	"slices"
)

func (c *Cache) pinnedLocked(d [32]byte) bool {
	return c.cfg.Pins != nil && c.cfg.Pins.Pinned(d)
}

// lruLocked lists the images eviction may take, least recently used first:
// ready (or being verified), neither listed by SetWanted nor added, not
// pinned.
func (c *Cache) lruLocked() []*entry {
	var out []*entry
	for _, e := range c.entries {
		if e.onDisk() && e.state != StateEvicting && !e.wanted() && !c.pinnedLocked(e.digest) {
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
		if e.onDisk() {
			used += e.size
		}
		if e.state == StateEvicting {
			leaving += e.size
		}
	}
	return used, leaving
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
	c.dropHeldLocked(e)
	if e.readers > 0 {
		c.log.Info("imagecache: evicting after readers finish", "sha256", hexOf(e.digest), "size", e.size, "readers", e.readers)
		e.state = StateEvicting
		return false
	}
	if e.stopVerify != nil {
		e.stopVerify() // the blob goes: stop hashing it
	}
	c.log.Info("imagecache: evicted", "sha256", hexOf(e.digest), "size", e.size)
	c.removeBlob(e.digest)
	delete(c.entries, e.digest)
	c.m.evictions.Inc()
	return true
}
