package imagecache

import (
	"fmt"

	"github.com/siteboot/siteboot/imagecache/pull"
)

// Free space: what pulls leave free when Config.MinFree is 0.
const (
	minFreeFloor   = 1 << 30 // 1 GiB
	minFreePercent = 5
	// statfsEvery is how much a pull writes between looks at the free
	// space: a pull of unknown size goes at most this far into the reserve.
	statfsEvery = 4 << 20
)

// defaultMinFree is the reserve on a file system of size bytes: the larger
// of 1 GiB and 5 % of it.
func defaultMinFree(size int64) int64 {
	return max(minFreeFloor, size/100*minFreePercent)
}

// setMinFree fills in the default reserve from the file system of Dir.
func (c *Cache) setMinFree() error {
	if c.cfg.MinFree != 0 {
		return nil
	}
	size, err := diskSize(c.dir)
	if err != nil {
		return err
	}
	c.cfg.MinFree = defaultMinFree(size)
	c.log.Info("imagecache: keeping disk space free for the rest of the data directory", "min_free", c.cfg.MinFree, "disk", size)
	return nil
}

// space is the cache's side of one pull: the capacity, the disk space to
// leave free, and eviction to make room.
type space struct {
	c        *Cache
	e        *entry
	statfsAt int64 // data size at which to look at the free space next
}

var _ pull.Space = (*space)(nil)

// Admit makes room for total bytes of which off are on disk: see admit.
func (s *space) Admit(total, off int64) error { return s.c.admit(s.e, total, off) }

// Check fails a pull whose data would outgrow the capacity, or that has
// brought the disk down to MinFree.
func (s *space) Check(size int64) error {
	cfg := s.c.cfg
	if cfg.Capacity > 0 && size > cfg.Capacity {
		return fmt.Errorf("image is larger than the cache capacity of %d bytes", cfg.Capacity)
	}
	if size < s.statfsAt {
		return nil
	}
	s.statfsAt = size + statfsEvery
	free, err := freeBytes(s.c.ingestDir)
	if err != nil {
		return err
	}
	if free < cfg.MinFree {
		return fmt.Errorf("not enough disk space: %d bytes available, keeping %d free", free, cfg.MinFree)
	}
	return nil
}

// admit makes room for a pull of total bytes of which off are on disk: it
// evicts released images for the capacity and for the disk space the pull
// needs, and fails when that is not enough.
func (c *Cache) admit(e *entry, total, off int64) error {
	free, err := freeBytes(c.ingestDir)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.Capacity > 0 && total > c.cfg.Capacity {
		return fmt.Errorf("image of %d bytes is larger than the cache capacity of %d bytes", total, c.cfg.Capacity)
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
		return fmt.Errorf("cache full: %d more bytes needed and no released image left to evict", capShort)
	}
	if diskShort > 0 {
		return fmt.Errorf("not enough disk space: %d bytes needed, %d available (keeping %d free)",
			total-off+othersLeft, free, c.cfg.MinFree)
	}
	return nil
}

// pullingLocked is what pulls other than skip have announced: their total
// sizes and what they still have to write.
func (c *Cache) pullingLocked(skip *entry) (total, remaining int64) {
	for _, e := range c.entries {
		if e == skip || e.state != StatePulling {
			continue
		}
		if t := e.progress.Total.Load(); t > 0 {
			total += t
			remaining += max(t-e.progress.Done.Load(), 0)
		}
	}
	return total, remaining
}
