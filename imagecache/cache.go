package imagecache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/siteboot/siteboot/imagecache/pull"
	"github.com/siteboot/siteboot/imagecache/serve"
)

// Cache is the verified image cache of one data directory. It is safe for
// concurrent use. Open it, serve Handler, run Run, and Close it after Run
// has returned.
type Cache struct {
	cfg       Config
	log       *slog.Logger
	own       *http.Transport // the default transport, closed by Close
	dir       string
	blobDir   string
	ingestDir string
	lockFile  *os.File
	m         *metrics
	puller    *pull.Puller
	srv       *serve.Server

	indexMu sync.Mutex // serialises index writes; taken before mu, never inside it

	mu      sync.Mutex
	entries map[[32]byte]*entry
	changed chan struct{} // closed and replaced on every state change
	closed  bool          // Close has run: held files are not kept (blobs.go); under mu
	sweeps  bool          // a sweep of held files is due (armSweepLocked); under mu
	// heldIdle is the time between sweeps (heldIdle; tests set their own
	// before the first response).
	heldIdle time.Duration
	seq      uint64 // queue order
	dirty    bool   // last-used times changed since the last index write

	kick     chan struct{}
	reverify chan struct{} // a ready blob changed on disk: wakes the verifier

	// commitRenamed, if set (by tests, before Run), runs in commit just
	// after the verified file is renamed to its blob path.
	commitRenamed func(blob string)
}

// entry is one image. Fields without a comment are guarded by Cache.mu.
type entry struct {
	digest   [32]byte
	want     Want
	state    State
	size     int64 // blob size when ready, verifying or evicting
	stamp    stamp // the blob's file as it was when verified (ready)
	lastUsed time.Time
	failedAt time.Time
	reason   string
	listed   bool
	added    bool
	readers  int
	queued   uint64 // order among queued entries
	busy     bool   // a worker owns its ingest files
	restart  bool   // drop the partial data when the worker stops
	cancel   context.CancelFunc
	release  func() // ends one reader; made once, so a response allocates none
	held     *held  // the blob's file the fast path shares while ready (blobs.go)
	opening  bool   // a response is opening the file to hold (openHeld)

	// A blob to verify that could not be read for a shortage waits until
	// verifyAfter, verifyWait after the last try (verifyLater).
	verifyAfter time.Time
	verifyWait  time.Duration

	// sizeUnvouched: size is only what the file found at Open claims (no
	// index entry recorded it), so verifying it must not trust it (load.go).
	sizeUnvouched bool
	stopVerify    context.CancelFunc // cancels the verifier's hash of this blob; under mu

	progress pull.Progress // bytes pulled (or hashed, while verifying), written by its worker
}

func (e *entry) wanted() bool { return e.listed || e.added }

// onDisk reports whether the image's blob is in the blob directory.
func (e *entry) onDisk() bool {
	return e.state == StateReady || e.state == StateVerifying || e.state == StateEvicting
}

// newEntry is a fresh entry for w, in no state yet.
func (c *Cache) newEntry(w Want) *entry {
	e := &entry{digest: w.SHA256, want: w}
	e.progress.Total.Store(-1)
	e.release = func() { c.release(e) }
	return e
}

// Open opens (creating it if needed) the cache in cfg.Dir: it takes the
// directory's lock, loads the index, scrubs leftovers of earlier runs and
// registers the metrics. It binds no socket and starts no pull: Run does.
func Open(cfg Config) (*Cache, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cache{
		cfg: cfg, log: cfg.Logger, dir: cfg.Dir,
		blobDir:   filepath.Join(cfg.Dir, "blobs", "sha256"),
		ingestDir: filepath.Join(cfg.Dir, "ingest"),
		entries:   make(map[[32]byte]*entry),
		changed:   make(chan struct{}),
		kick:      make(chan struct{}, 1),
		reverify:  make(chan struct{}, 1),
		heldIdle:  heldIdle,
	}
	if err := c.openDir(); err != nil {
		return nil, err
	}
	if err := c.setMinFree(); err != nil {
		c.unlock()
		return nil, err
	}
	c.m = newMetrics(c)
	client, own := pullClient(cfg.HTTPClient)
	c.own = own
	c.puller = pull.New(pull.Config{
		Client: client, Retries: cfg.Retries, Backoff: cfg.Backoff, Sleep: cfg.Sleep,
		StallTimeout: cfg.StallTimeout, CheckpointBytes: cfg.CheckpointBytes,
		Logger: cfg.Logger, Bytes: c.m.pullBytes,
	})
	c.srv = serve.New(serve.Config{Store: blobs{c}, RetryAfter: cfg.RetryAfter, Logger: cfg.Logger, Metrics: c.m.serve})
	if err := c.load(); err != nil {
		c.unlock()
		return nil, err
	}
	if cfg.Metrics != nil {
		if err := c.m.register(cfg.Metrics); err != nil {
			c.unlock()
			return nil, fmt.Errorf("imagecache: register metrics: %w", err)
		}
	}
	if err := c.persist(); err != nil {
		c.unlock()
		return nil, err
	}
	return c, nil
}

func (c *Cache) openDir() error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("imagecache: create %s: %w", c.dir, err)
	}
	uid, err := ownerOfNewFiles(c.dir)
	if err != nil {
		return err
	}
	if err := c.ownDir(c.dir, true, uid); err != nil {
		return err
	}
	// Each inside directory is checked before one is made in it: a link
	// put there is refused before anything is created where it points.
	for _, d := range []string{filepath.Dir(c.blobDir), c.blobDir, c.ingestDir} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("imagecache: create %s: %w", d, err)
		}
		if err := c.ownDir(d, false, uid); err != nil {
			return err
		}
	}
	f, err := lockDir(filepath.Join(c.dir, "lock"))
	if err != nil {
		return err
	}
	c.lockFile = f
	return nil
}

// ownerOfNewFiles is the owner the file system gives a file this process
// creates in dir: its user, or another where the file system maps owners
// (NFS with root squashed, id-mapped mounts).
func ownerOfNewFiles(dir string) (uint32, error) {
	f, err := os.CreateTemp(dir, ".owner-*")
	if err != nil {
		var st unix.Stat_t
		if errors.Is(err, os.ErrPermission) && unix.Stat(dir, &st) == nil && st.Uid != uint32(os.Geteuid()) {
			return 0, notOwnedError(dir, st.Uid, uint32(os.Geteuid()))
		}
		return 0, fmt.Errorf("imagecache: cannot create a file in %s: %w", dir, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("imagecache: %s: %w", f.Name(), err)
	}
	return st.Uid, nil
}

// notOwnedError says that dir belongs to owner, not to want, and how to
// give it to want (through a link to another disk too).
func notOwnedError(dir string, owner, want uint32) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = dir
	}
	return fmt.Errorf("imagecache: %s belongs to uid %d, not to uid %d, which owns the files this process creates there: files that user put there could be served; chown -R %d %s/", dir, owner, want, want, real)
}

// ownDir makes sure only this process's user can put files in dir: it
// must be a directory owned by uid (the owner of files this process
// creates), and writable by no one else (group or other write is taken
// away, with a warning). Files put in the cache's directories by another
// user could otherwise be served, or written through (blobs.go and
// package pull refuse what they can recognise; a directory nobody else
// can write leaves nothing to recognise). The cache's own directory may
// be a symbolic link (to another disk); the ones inside it may not.
func (c *Cache) ownDir(dir string, follow bool, uid uint32) error {
	var st unix.Stat_t
	stat := unix.Lstat
	if follow {
		stat = unix.Stat
	}
	if err := stat(dir, &st); err != nil {
		return fmt.Errorf("imagecache: %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("imagecache: %s is not a directory (a link?): move it away; the cache makes its own", dir)
	}
	if st.Uid != uid {
		return notOwnedError(dir, st.Uid, uid)
	}
	if perm := uint32(st.Mode) & 0o7777; perm&0o022 != 0 {
		// Special bits (setgid, sticky) go too: no use here, and a
		// service forbidden to set them could not chmod to keep them.
		mode := perm & 0o755
		if err := os.Chmod(dir, os.FileMode(mode)); err != nil {
			return fmt.Errorf("imagecache: %s is writable by group or others (mode %o) and cannot be changed: %w", dir, perm, err)
		}
		c.log.Warn("imagecache: directory was writable by group or others; no longer", "dir", dir,
			"mode_was", fmt.Sprintf("%o", perm), "mode", fmt.Sprintf("%o", mode))
	}
	return nil
}

func (c *Cache) unlock() {
	if c.lockFile != nil {
		c.lockFile.Close()
		c.lockFile = nil
	}
}

// Close persists the index and releases the directory. Call it after Run
// has returned.
func (c *Cache) Close() error {
	c.mu.Lock()
	c.closed = true // no response holds a blob open after this
	for _, e := range c.entries {
		c.dropHeldLocked(e)
	}
	c.mu.Unlock()
	c.srv.FlushLogs(true) // what responses after Run's last flush held back
	err := c.persist()
	if c.own != nil {
		c.own.CloseIdleConnections()
	}
	c.unlock()
	return err
}

// pullClient returns the client pulls use: a shallow copy of base (or a
// default one) that refuses redirects from https to http.
func pullClient(base *http.Client) (*http.Client, *http.Transport) {
	var own *http.Transport
	if base == nil {
		own = &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   15 * time.Second,
			ResponseHeaderTimeout: time.Minute,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   4,
			DisableCompression:    true,
			ForceAttemptHTTP2:     true,
		}
		base = &http.Client{Transport: own}
	}
	cl := *base
	next := base.CheckRedirect
	cl.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		for _, v := range via {
			if v.URL.Scheme == "https" && req.URL.Scheme != "https" {
				return errors.New("redirect from https to http refused")
			}
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &cl, own
}

// notifyLocked wakes everything waiting for a state change.
func (c *Cache) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// kickWorkers wakes one idle worker.
func (c *Cache) kickWorkers() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Cache) blobPath(d [32]byte) string { return filepath.Join(c.blobDir, hexOf(d)) }
func (c *Cache) partPath(d [32]byte) string { return filepath.Join(c.ingestDir, hexOf(d)+".part") }
func (c *Cache) ckptPath(d [32]byte) string { return filepath.Join(c.ingestDir, hexOf(d)+".ckpt") }
func (c *Cache) indexPath() string          { return filepath.Join(c.dir, "index.json") }

// removeIngestLocked deletes the ingest files of an entry no worker owns.
func (c *Cache) removeIngestLocked(d [32]byte) {
	for _, p := range []string{c.partPath(d), c.ckptPath(d)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.log.Error("imagecache: remove ingest file", "path", p, "err", err)
		}
	}
}

func (c *Cache) removeBlob(d [32]byte) {
	if err := os.Remove(c.blobPath(d)); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Error("imagecache: delete blob", "sha256", hexOf(d), "err", err)
	}
}
