package imagecache

import (
	"bytes"
	"fmt"
	"time"
)

// SetWanted declares the images the site wants: the site spec's
// cache_images, plus hand-added images when the caller keeps those in its
// own (replicated) state instead of calling Add. Missing ones are
// queued; listed ones that failed are retried only when their source
// changed; images no longer listed (and not added with Add) are released:
// kept and served until eviction needs their space, while their pulls, if
// any, are cancelled. A digest listed twice keeps its first URL. An invalid
// Want is an error and changes nothing.
func (c *Cache) SetWanted(ws []Want) error {
	for i, w := range ws {
		if err := w.Validate(); err != nil {
			return fmt.Errorf("cache_images[%d]: %w", i, err)
		}
	}
	c.mu.Lock()
	listed := make(map[[32]byte]bool, len(ws))
	for _, w := range ws {
		if !listed[w.SHA256] {
			listed[w.SHA256] = true
			c.wantLocked(w, false).listed = true
		}
	}
	for d, e := range c.entries {
		if e.listed && !listed[d] {
			e.listed = false
			c.releaseLocked(e)
		}
	}
	c.settleLocked()
	return c.persist()
}

// Add adds an operator's image ("image add"): it is kept until Remove, like
// a site spec image. Adding an image that failed retries it.
func (c *Cache) Add(w Want) error {
	if err := w.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	c.wantLocked(w, true).added = true
	c.settleLocked()
	return c.persist()
}

// settleLocked ends a change: eviction, waiters, workers. It unlocks mu.
func (c *Cache) settleLocked() {
	c.enforceCapacityLocked()
	c.notifyLocked()
	c.mu.Unlock()
	c.kickWorkers()
}

// wantLocked returns the entry for w, creating and queueing it as needed.
func (c *Cache) wantLocked(w Want, retry bool) *entry {
	e := c.entries[w.SHA256]
	if e == nil {
		e = c.newEntry(w)
		c.entries[w.SHA256] = e
		c.queueLocked(e)
		return e
	}
	changed := !sameSource(e.want, w)
	switch {
	case e.state == StateEvicting && e.stamp == (stamp{}):
		// It was being verified again when it was evicted: it goes back
		// to that, not to ready (it would be reported ready unverified).
		e.state, e.verifyAfter, e.verifyWait = StateVerifying, time.Time{}, 0
		defer c.wakeVerifier()
	case e.state == StateEvicting:
		e.state = StateReady
	case e.state == StateFailed && (changed || retry):
		e.want = w
		c.queueLocked(e)
	case e.state == StateQueued && changed:
		e.want = w
		c.removeIngestLocked(e.digest)
	case e.state == StatePulling && changed:
		e.want, e.restart = w, true
		e.cancel()
	case e.want.URL == "": // an adopted blob learns where it came from
		e.want = w
	}
	e.want.Format, e.want.ImageID = w.Format, w.ImageID
	return e
}

func sameSource(a, b Want) bool {
	return a.URL == b.URL && a.Compression == b.Compression && bytes.Equal(a.SourceSHA256, b.SourceSHA256) && a.Size == b.Size
}

func (c *Cache) queueLocked(e *entry) {
	c.seq++
	e.state, e.queued = StateQueued, c.seq
	e.progress.Done.Store(0)
	e.progress.Total.Store(-1)
}

// releaseLocked handles an entry that is no longer wanted.
func (c *Cache) releaseLocked(e *entry) {
	if e.wanted() {
		return
	}
	switch e.state {
	case StatePulling:
		e.cancel() // the worker drops it when it stops
	case StateQueued, StateFailed:
		c.removeIngestLocked(e.digest)
		delete(c.entries, e.digest)
	}
}

// Remove is "image rm": it drops an image the operator added or the cache
// holds released. A ready image is deleted once the requests reading it
// have finished (EVICTING meanwhile; a response whose client makes no
// progress is cut off by the HTTP server's progress deadline); a pull in
// progress is cancelled.
// It refuses with ErrWanted or ErrPinned, and ErrNotFound.
func (c *Cache) Remove(digest [32]byte) error {
	c.mu.Lock()
	e := c.entries[digest]
	var err error
	switch {
	case e == nil:
		err = ErrNotFound
	case e.listed:
		err = ErrWanted
	case c.pinnedLocked(digest):
		err = ErrPinned
	}
	if err != nil {
		c.mu.Unlock()
		return fmt.Errorf("%w: %s", err, hexOf(digest))
	}
	e.added = false
	if e.state == StateReady || e.state == StateVerifying {
		c.evictLocked(e)
	} else {
		c.releaseLocked(e)
	}
	c.settleLocked()
	return c.persist()
}

// Retry queues a wanted image that failed again now ("image pull"); any
// other image is left as it is. ErrNotFound when the cache neither holds nor
// wants the digest.
func (c *Cache) Retry(digest [32]byte) error {
	c.mu.Lock()
	e := c.entries[digest]
	if e == nil {
		c.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotFound, hexOf(digest))
	}
	if e.state == StateFailed && e.wanted() {
		c.queueLocked(e)
	}
	c.settleLocked()
	return c.persist()
}
