package images

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/siteboot/siteboot/internal/httpfile"
	"github.com/siteboot/siteboot/internal/redact"
)

// HTTPPrefix is the URL path the boot files are served under.
const HTTPPrefix = "/boot/"

// Handler serves GET and HEAD /boot/<name> for every file of the set with
// httpfile.Serve, the policy every file the appliance serves follows: one
// byte range (206, or 416 past the end), conditional requests against a
// strong ETag (the quoted hex SHA-256), Content-Type
// application/octet-stream; several ranges get the whole file with 200. An
// unknown name is 404, an invalid one 400, a file changed since load 503,
// any other method 405. Mount it at HTTPPrefix.
func (s *Set) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Set) serveHTTP(w http.ResponseWriter, r *http.Request) {
	log := s.log.With("remote", r.RemoteAddr, "method", r.Method, "path", redact.Clip(r.URL.Path))
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, HTTPPrefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	f, _, err := s.Open(name)
	if err != nil {
		code := httpStatus(err)
		log.Debug("boot file request refused", "status", code, "err", err)
		http.Error(w, http.StatusText(code), code)
		return
	}
	defer f.Close()
	e := s.files[name]
	code, sent, err := httpfile.Serve(w, r, f, e.Size, e.etag)
	level, held := s.logLevel(r.RemoteAddr, name, slog.LevelInfo)
	log.Log(r.Context(), level, "served boot file", "file", name, "size", e.Size,
		"range", redact.Clip(r.Header.Get("Range")), "status", code, "bytes", sent, held)
	if err != nil {
		log.Debug("boot file response cut short", "err", err)
	}
}

// httpStatus maps an Open error to an HTTP status.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, ErrInvalidName):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrChanged):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
