package serve

import (
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/siteboot/siteboot/internal/httpfile"
	"github.com/siteboot/siteboot/internal/redact"
)

// Handler returns the handler of GET and HEAD /cache/<sha256 hex>: mount it
// on PathPrefix. It serves only verified blobs; an image on its way (queued,
// pulling, being verified) gets 503 with Retry-After, an unknown, failed or
// evicting one 404, a malformed path 400. The response writer reaches the
// file unwrapped, so the body goes out through the kernel's sendfile path.
func (s *Server) Handler() http.Handler { return handler{s} }

type handler struct{ s *Server }

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	code, sent := h.s.serveHTTP(w, r)
	h.s.m.Requests.WithLabelValues(strconv.Itoa(code)).Inc()
	h.s.m.BytesServed.Add(float64(sent))
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) (int, int64) {
	log := s.log
	if log.Enabled(r.Context(), slog.LevelDebug) {
		log = log.With("method", r.Method, "path", redact.Clip(r.URL.Path), "remote", r.RemoteAddr)
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
	b, ok, err := s.store.Acquire(d)
	switch {
	case err != nil:
		s.logFailure(r.Context(), log, "open", d, "imagecache: open blob", "err", err)
		return reply(w, http.StatusInternalServerError, "cannot open the image")
	case !ok && s.store.Pending(d):
		w.Header().Set("Retry-After", s.retryAfter)
		return reply(w, http.StatusServiceUnavailable, "image is being pulled or verified")
	case !ok:
		return reply(w, http.StatusNotFound, "image not in the cache")
	}
	defer b.Release()
	defer b.File.Close()
	if fi, err := b.File.Stat(); err != nil || fi.Size() != b.Size {
		s.logFailure(r.Context(), log, "size", d, "imagecache: blob size differs from the verified size", "want", b.Size)
		return reply(w, http.StatusInternalServerError, "image unavailable")
	}
	return sendBlob(w, r, b, hex.EncodeToString(d[:]), log)
}

// sendBlob answers for an open blob, checked to have its verified size,
// under httpfile's policy.
func sendBlob(w http.ResponseWriter, r *http.Request, b Blob, hexd string, log *slog.Logger) (int, int64) {
	hd := w.Header()
	hd.Set("Cache-Control", "public, max-age=31536000, immutable")
	hd.Set("X-Content-Type-Options", "nosniff")
	code, n, err := httpfile.Serve(w, r, b.File, b.Size, `"`+hexd+`"`)
	if err != nil {
		log.Debug("imagecache: response cut short", "sha256", hexd, "sent", n, "err", err)
		return code, n
	}
	log.Debug("imagecache: served", "sha256", hexd, "method", r.Method, "code", code, "bytes", n)
	return code, n
}

func reply(w http.ResponseWriter, code int, msg string) (int, int64) {
	http.Error(w, msg, code)
	return code, 0
}
