package imagecache

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
)

// Handler returns the handler of GET and HEAD /cache/<sha256 hex>: mount it
// on PathPrefix. It serves only verified blobs; an image still pulling gets
// 503 with Retry-After, an unknown, failed or evicting one 404, a malformed
// path 400. The response writer reaches the file unwrapped, so the body
// goes out through the kernel's sendfile path.
func (c *Cache) Handler() http.Handler { return handler{c: c} }

type handler struct{ c *Cache }

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	code, sent := h.c.serve(w, r)
	h.c.m.requests.WithLabelValues(strconv.Itoa(code)).Inc()
	h.c.m.bytesServed.Add(float64(sent))
}

func (c *Cache) serve(w http.ResponseWriter, r *http.Request) (int, int64) {
	log := c.log
	if log.Enabled(r.Context(), slog.LevelDebug) {
		log = log.With("method", r.Method, "path", clip(r.URL.Path), "remote", r.RemoteAddr)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return reply(w, http.StatusMethodNotAllowed, "method not allowed")
	}
	d, err := ParsePath(r.URL.Path)
	if err != nil {
		log.Debug("imagecache: ignored request", "reason", "malformed path")
		return reply(w, http.StatusBadRequest, err.Error())
	}
	e, f, state, err := c.acquire(d)
	switch {
	case err != nil:
		log.Error("imagecache: open blob", "err", err)
		return reply(w, http.StatusInternalServerError, "cannot open the image")
	case state == StateQueued || state == StatePulling:
		w.Header().Set("Retry-After", strconv.Itoa(int(max(c.cfg.RetryAfter.Seconds(), 1))))
		return reply(w, http.StatusServiceUnavailable, "image is being pulled")
	case e == nil:
		return reply(w, http.StatusNotFound, "image not in the cache")
	}
	defer c.release(e)
	defer f.Close()
	return c.sendBlob(w, r, f, e, log)
}

// acquire counts a reader on a ready image and opens its blob; eviction
// waits for the count to drop to zero before it deletes the file.
func (c *Cache) acquire(d [32]byte) (*entry, *os.File, State, error) {
	c.mu.Lock()
	e := c.entries[d]
	if e == nil || e.state != StateReady {
		var st State
		if e != nil {
			st = e.state
		}
		c.mu.Unlock()
		return nil, nil, st, nil
	}
	e.readers++
	e.lastUsed, c.dirty = c.cfg.Now(), true
	c.mu.Unlock()
	f, err := openBlob(c.blobPath(d))
	if err != nil {
		c.release(e)
		return nil, nil, 0, err
	}
	return e, f, StateReady, nil
}

func (c *Cache) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.readers--
	if e.state == StateEvicting && e.readers == 0 {
		c.evictLocked(e)
		c.notifyLocked()
	}
}

// sendBlob answers for an open blob: conditionals, then the range, then the
// body handed to the writer's ReadFrom by io.CopyN.
func (c *Cache) sendBlob(w http.ResponseWriter, r *http.Request, f *os.File, e *entry, log *slog.Logger) (int, int64) {
	size := e.size
	if fi, err := f.Stat(); err != nil || fi.Size() != size {
		log.Error("imagecache: blob size differs from the verified size", "sha256", hexOf(e.digest), "want", size)
		return reply(w, http.StatusInternalServerError, "image unavailable")
	}
	etag := `"` + hexOf(e.digest) + `"`
	hd := w.Header()
	hd.Set("ETag", etag)
	hd.Set("Accept-Ranges", "bytes")
	hd.Set("Cache-Control", "public, max-age=31536000, immutable")
	hd.Set("X-Content-Type-Options", "nosniff")
	code, rng := condsOf(r).answer(r.Method == http.MethodGet, etag, size)
	switch code {
	case http.StatusPreconditionFailed, http.StatusNotModified:
		return status(w, code)
	case http.StatusRequestedRangeNotSatisfiable:
		hd.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
		hd.Set("Content-Length", "0")
		return status(w, code)
	case http.StatusPartialContent:
		hd.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", rng.start, rng.start+rng.length-1, size))
	}
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Length", strconv.FormatInt(rng.length, 10))
	w.WriteHeader(code)
	if r.Method == http.MethodHead || rng.length == 0 {
		log.Debug("imagecache: served", "sha256", hexOf(e.digest), "method", r.Method, "code", code, "start", rng.start, "bytes", 0)
		return code, 0
	}
	if _, err := f.Seek(rng.start, io.SeekStart); err != nil {
		log.Error("imagecache: seek blob", "err", err)
		return code, 0
	}
	// With the headers out, net/http hands the whole range to sendfile;
	// otherwise it first copies 512 bytes through user space.
	_ = http.NewResponseController(w).Flush()
	n, err := io.CopyN(w, f, rng.length) // w.ReadFrom: sendfile
	if err != nil {
		log.Debug("imagecache: response cut short", "sha256", hexOf(e.digest), "sent", n, "want", rng.length, "err", err)
		return code, n
	}
	log.Debug("imagecache: served", "sha256", hexOf(e.digest), "method", r.Method, "code", code, "start", rng.start, "bytes", n)
	return code, n
}

func reply(w http.ResponseWriter, code int, msg string) (int, int64) {
	http.Error(w, msg, code)
	return code, 0
}

func status(w http.ResponseWriter, code int) (int, int64) {
	w.WriteHeader(code)
	return code, 0
}
