package imagecache

import (
	"net"
	"net/http"

	"github.com/siteboot/siteboot/imagecache/serve"
)

// Handler returns the handler of GET and HEAD /cache/<sha256 hex>: mount it
// on PathPrefix. It serves only verified blobs; an image on its way
// (queued, pulling, being verified) gets 503 with Retry-After, an unknown,
// failed or evicting one 404, a malformed path 400 (package serve).
func (c *Cache) Handler() http.Handler { return c.srv.Handler() }

// ListenerConfig sets the fast path's timeouts; give it the http.Server's.
type ListenerConfig = serve.ListenerConfig

// Listener is the fast path in front of net/http (serve.Listener).
type Listener = serve.Listener

// Listener wraps ln with the fast path. Serve it with an http.Server whose
// handler mounts Handler on PathPrefix; Close it through the server, then
// Shutdown it.
func (c *Cache) Listener(ln net.Listener, cfg ListenerConfig) *Listener {
	return c.srv.Listener(ln, cfg)
}

// blobs is the cache as serving sees it.
type blobs struct{ c *Cache }

var _ serve.Store = blobs{}

// Acquire counts a reader on a ready image and opens its blob; eviction
// waits for the count to drop to zero before it deletes the file.
func (b blobs) Acquire(d [32]byte) (serve.Blob, bool, error) {
	c := b.c
	c.mu.Lock()
	e := c.entries[d]
	if e == nil || e.state != StateReady {
		c.mu.Unlock()
		return serve.Blob{}, false, nil
	}
	e.readers++
	e.lastUsed, c.dirty = c.cfg.Now(), true
	want, size := e.stamp, e.size
	c.mu.Unlock()
	f, err := openBlob(c.blobPath(d))
	if err != nil {
		c.release(e)
		return serve.Blob{}, false, err
	}
	if fi, err := f.Stat(); err != nil || stampOfInfo(fi) != want {
		f.Close()
		c.release(e)
		c.changedOnDisk(e, want)
		return serve.Blob{}, false, nil
	}
	return serve.Blob{File: f, Size: size, Release: e.release}, true, nil
}

// changedOnDisk sends a ready blob whose file is no longer the one that was
// verified (written to, or replaced, while the cache runs) back to
// StateVerifying, and wakes the verifier: it is not served until its hash
// is checked again.
func (c *Cache) changedOnDisk(e *entry, verified stamp) {
	c.mu.Lock()
	if c.entries[e.digest] != e || e.state != StateReady || e.stamp != verified {
		c.mu.Unlock() // evicted, or already handled
		return
	}
	e.state, e.stamp, c.dirty = StateVerifying, stamp{}, true
	c.log.Warn("imagecache: blob changed on disk since it was verified; verifying it again", "sha256", hexOf(e.digest))
	c.notifyLocked()
	c.mu.Unlock()
	select {
	case c.reverify <- struct{}{}:
	default:
	}
}

// Pending reports whether d is on its way to ready.
func (b blobs) Pending(d [32]byte) bool {
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	e := b.c.entries[d]
	return e != nil && (e.state == StateQueued || e.state == StatePulling || e.state == StateVerifying)
}

// release ends one reader of e; the last reader of an evicting image
// deletes its blob.
func (c *Cache) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.readers--
	if e.state == StateEvicting && e.readers == 0 {
		c.evictLocked(e)
		c.notifyLocked()
	}
}
