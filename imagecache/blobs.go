package imagecache

import (
	"errors"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

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
	e := c.readerLocked(d)
	if e == nil {
		c.mu.Unlock()
		return serve.Blob{}, false, nil
	}
	want, size := e.stamp, e.size
	c.mu.Unlock()
	f, ok, err := c.openVerified(e, want)
	if !ok {
		return serve.Blob{}, false, err
	}
	return serve.Blob{File: f, Size: size, Release: e.release}, true, nil
}

// readerLocked counts a reader on d's image if it is ready, and returns
// its entry; nil if it is not ready.
func (c *Cache) readerLocked(d [32]byte) *entry {
	e := c.entries[d]
	if e == nil || e.state != StateReady {
		return nil
	}
	e.readers++
	e.lastUsed, c.dirty = c.cfg.Now(), true
	return e
}

// openVerified opens e's blob, a reader on it already counted, and checks
// it is the file verified (want). When it cannot hand the file out, it
// ends the read: an error to open it, or a file that is not the one
// verified or is gone, which sends the blob back to be verified (ok
// false, err nil).
func (c *Cache) openVerified(e *entry, want stamp) (*os.File, bool, error) {
	path := c.blobPath(e.digest)
	f, st, err := openBlob(path)
	if err != nil {
		c.release(e)
		// What is at the path now? lstat takes no descriptor, so it
		// answers when the process is out of them.
		cur, lerr := lstampOf(path)
		switch {
		case lerr == nil && cur == want:
			// The file verified, not readable now: out of descriptors or
			// memory (a flood of connections), an I/O error. It is not
			// sent back to be hashed for that.
			return nil, false, err
		case lerr == nil:
			// Something else is at the path (a FIFO, device, socket or
			// link, a file under a lease, a replacement): the verifier
			// looks, deletes what is not the image, and it is pulled again.
			c.changedOnDisk(e, want, changedMsg)
			return nil, false, nil
		case errors.Is(lerr, os.ErrNotExist) && dirExists(c.blobDir): // deleted behind the cache's back
			c.changedOnDisk(e, want, "missing from disk")
			return nil, false, nil
		}
		return nil, false, err // the directory gone too (unmounted?), or no lstat: keep the entry
	}
	if st != want {
		f.Close()
		c.release(e)
		c.changedOnDisk(e, want, changedMsg)
		return nil, false, nil
	}
	return f, true, nil
}

// held is a ready blob's file kept open for the fast path: opened by the
// first fast response (the opener, openHeld), shared by every one after it
// (those that come while the opener opens it read their own files, in
// helds of their own, unmapped), and closed once the
// entry no longer holds it (evicted, changed on disk, verified again, or
// idle: no response for heldIdle, see sweepHeld) and the last response
// reading it has released it. Every response checks it
// is still the file verified with one fstat, made as a raw system call
// (the fast path makes no runtime system call per response: package
// internal/httpserver says why). A write changes the file's ctime, and so
// does a rename or unlink of it: a blob written in place, or replaced on
// disk by another file, is verified again before the next response (a
// blob deleted behind the cache's back keeps its space until then, or
// until the file is idle, evicted or closed). A shared file is only read at an offset
// (sendfile with one, ReadAt): nothing moves its own offset.
//
// The file is also mapped (read-only, never touched through the mapping)
// so that inMemory can ask mincore whether a range is in memory: the fast
// path's sendfile is a raw call only then (internal/httpserver's
// SendResidentAt).
type held struct {
	f        *os.File
	mem      []byte // f mapped, for mincore; nil if it is not (not the opener's, or mmap failed)
	stamp    stamp
	refs     int                     // the entry's own while it holds it, and one per response; under c.mu
	used     bool                    // a response took it since the last sweepHeld; under c.mu
	release  func()                  // ends one response's read; made once
	inMemory func(off, n int64) bool // h.resident, made once
}

// newHeld wraps f, a file of e, for a response, one reference taken,
// released by releasing e; mapped (for mincore) if mapIt.
func (c *Cache) newHeld(e *entry, f *os.File, st stamp, size int64, mapIt bool) *held {
	h := &held{f: f, stamp: st, refs: 1}
	if mapIt && size > 0 {
		if mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED); err == nil {
			h.mem = mem
		}
	}
	h.release = func() { c.releaseHeld(e, h) }
	h.inMemory = h.resident
	return h
}

// close unmaps and closes h's file; its last reference is gone.
func (h *held) close() {
	if h.mem != nil {
		_ = unix.Munmap(h.mem)
	}
	h.f.Close()
}

// maxResidentPages bounds the range resident looks at: a larger one is
// never called resident (the fast path sends those from bulk loops).
const maxResidentPages = 1024

// resident reports whether every page of h's bytes [off, off+n) is in
// memory and read, so that sendfile of them does not wait for the disk.
// mincore counts a page only once its read is done (cachestat would count
// one readahead has only begun to read). A raw call: it never sleeps.
func (h *held) resident(off, n int64) bool {
	if h.mem == nil || n <= 0 || off < 0 || off+n > int64(len(h.mem)) {
		return false
	}
	ps := int64(os.Getpagesize())
	start := off &^ (ps - 1)
	pages := (off + n - start + ps - 1) / ps
	if pages > maxResidentPages {
		return false
	}
	var vec [maxResidentPages]byte
	_, _, e := syscall.RawSyscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&h.mem[start])), uintptr(off+n-start),
		uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return false
	}
	for _, v := range vec[:pages] {
		if v&1 == 0 {
			return false
		}
	}
	return true
}

// shareBlobs: the fast path shares held files; false opens one per
// response, as Acquire does (a test compares the two).
var shareBlobs atomic.Bool

func init() { shareBlobs.Store(true) }

// AcquireShared is Acquire for the fast path: the blob's file is the one
// the cache holds open for it, shared with other responses; the caller
// reads it only at offsets and never closes it, and calls Release once.
func (b blobs) AcquireShared(d [32]byte) (serve.Blob, bool, error) {
	c := b.c
	c.mu.Lock()
	e := c.readerLocked(d)
	if e == nil {
		c.mu.Unlock()
		return serve.Blob{}, false, nil
	}
	var stale *held
	if h := e.held; h != nil && h.stamp != e.stamp {
		stale = c.detachHeldLocked(e) // verified again since it was opened
	}
	h, want, size := e.held, e.stamp, e.size
	if h == nil || !shareBlobs.Load() {
		opener := (!e.opening && !c.closed) || !shareBlobs.Load()
		e.opening = e.opening || opener
		c.mu.Unlock()
		if stale != nil {
			stale.close()
		}
		return c.openHeld(e, want, size, opener)
	}
	h.refs++
	h.used = true
	c.mu.Unlock()
	if !fileIs(h.f, h.stamp) {
		h.release()
		c.changedOnDisk(e, h.stamp, changedMsg)
		return serve.Blob{}, false, nil
	}
	return serve.Blob{File: h.f, Size: size, Release: h.release, InMemory: h.inMemory}, true, nil
}

// openHeld opens e's blob for a response, its reader counted, as Acquire
// does. The opener (the first response to find no held file) maps it and
// makes it the entry's held file if the entry is still ready with the
// stamp it was checked against and holds none yet. Responses that came
// while it opened read their own files, unmapped and closed at their
// release: a storm's first responses must not each map the whole image
// (on a 32-bit system a few maps of a large image would take the address
// space the runtime needs).
func (c *Cache) openHeld(e *entry, want stamp, size int64, opener bool) (serve.Blob, bool, error) {
	f, ok, err := c.openVerified(e, want)
	if !ok {
		if opener {
			c.mu.Lock()
			e.opening = false
			c.mu.Unlock()
		}
		return serve.Blob{}, false, err
	}
	h := c.newHeld(e, f, want, size, opener)
	if hook := testHookHeldOpened; hook != nil {
		hook()
	}
	c.mu.Lock()
	if opener {
		e.opening = false
		if !c.closed && c.entries[e.digest] == e && e.state == StateReady && e.stamp == want && e.held == nil && shareBlobs.Load() {
			e.held = h
			h.refs++ // the entry's own
			h.used = true
			c.armSweepLocked()
		}
	}
	c.mu.Unlock()
	return serve.Blob{File: f, Size: size, Release: h.release, InMemory: h.inMemory}, true, nil
}

// testHookHeldOpened, if set (by tests, before any response), runs in
// openHeld between opening a file and offering it as the held one.
var testHookHeldOpened func()

// releaseHeld ends one response's read of h, a file of e.
func (c *Cache) releaseHeld(e *entry, h *held) {
	c.mu.Lock()
	h.refs--
	last := h.refs == 0
	c.mu.Unlock()
	if last {
		h.close()
	}
	c.release(e)
}

// dropHeldLocked lets go of e's held file: it closes now, or when the last
// response reading it releases it. Call it whenever e stops being ready
// with the stamp its file was held for, before the blob is deleted: a
// deleted file kept open keeps its space.
func (c *Cache) dropHeldLocked(e *entry) {
	if h := c.detachHeldLocked(e); h != nil {
		h.close()
	}
}

// detachHeldLocked is dropHeldLocked that leaves the close to the caller,
// after c.mu: the file, if this was its last reference (else nil).
// Closing the last descriptor of a blob deleted by hand frees its blocks,
// which may take a while.
func (c *Cache) detachHeldLocked(e *entry) *held {
	h := e.held
	if h == nil {
		return nil
	}
	e.held = nil
	h.refs--
	if h.refs == 0 {
		return h
	}
	return nil
}

// heldIdle is how often the cache looks for held files no response has
// taken since its last look, while it holds any (sweepHeld): an image
// nobody reads closes its file within two of these, so that the
// descriptors open after a boot storm are those before it, and a blob
// deleted by hand frees its space soon. Opening it again is three system
// calls at the next response. With no held file there is no look.
const heldIdle = time.Second

// armSweepLocked makes sure a sweep of held files is due within heldIdle.
func (c *Cache) armSweepLocked() {
	if !c.sweeps {
		c.sweeps = true
		time.AfterFunc(c.heldIdle, c.sweepHeld)
	}
}

// sweepHeld drops the held files no response took since the last sweep
// and none is reading now, and arms the next sweep while some are left.
// The files close after the lock: closing the last descriptor of a blob
// deleted by hand frees its blocks, which may take a while.
func (c *Cache) sweepHeld() {
	var idle []*held
	c.mu.Lock()
	c.sweeps = false
	for _, e := range c.entries {
		switch h := e.held; {
		case h == nil:
		case h.used:
			h.used = false
			c.armSweepLocked()
		case h.refs == 1: // the entry's own: the detach is its last
			idle = append(idle, c.detachHeldLocked(e))
		default: // responses are reading it
			c.armSweepLocked()
		}
	}
	c.mu.Unlock()
	for _, h := range idle {
		h.close()
	}
}

// changedMsg is what changedOnDisk logs of a blob whose file is not the
// one verified.
const changedMsg = "changed on disk since it was verified"

// dirExists reports whether dir is there (a missing blob in a missing
// directory is not a blob deleted by hand).
func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

// fileIs reports whether the open file f is still the file of stamp st
// (size, inode, mtime and ctime: a write changes ctime). The fstat is a
// raw system call: it reads the inode in memory and does not wait for the
// disk on a local file system.
func fileIs(f *os.File, st stamp) bool {
	var s unix.Stat_t
	if fstat(f.Fd(), &s) != nil {
		return false
	}
	return stampOfStat(&s) == st
}

// changedOnDisk sends a ready blob whose file is no longer the one that was
// verified (written to, or replaced, while the cache runs) back to
// StateVerifying, and wakes the verifier: it is not served until its hash
// is checked again.
func (c *Cache) changedOnDisk(e *entry, verified stamp, what string) {
	c.mu.Lock()
	if c.entries[e.digest] != e || e.state != StateReady || e.stamp != verified {
		c.mu.Unlock() // evicted, or already handled
		return
	}
	e.state, e.stamp, c.dirty = StateVerifying, stamp{}, true
	h := c.detachHeldLocked(e)
	c.log.Warn("imagecache: blob "+what+"; verifying it again", "sha256", hexOf(e.digest))
	c.notifyLocked()
	c.mu.Unlock()
	if h != nil {
		h.close()
	}
	c.wakeVerifier()
}

// wakeVerifier tells the verifier that a blob waits to be verified.
func (c *Cache) wakeVerifier() {
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
