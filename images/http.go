package images

import (
	"errors"
	"net/http"
	"path"
	"strings"
)

// HTTPPrefix is the URL path the boot files are served under.
const HTTPPrefix = "/boot/"

// Handler serves GET and HEAD /boot/<name> for every file of the set with
// http.ServeContent: single and multiple ranges, conditional requests,
// Content-Type application/octet-stream and a strong ETag (the quoted hex
// SHA-256). An unknown name is 404, an invalid one 400, a file changed
// since load 503, any other method 405. Mount it at HTTPPrefix.
func (s *Set) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Set) serveHTTP(w http.ResponseWriter, r *http.Request) {
	log := s.log.With("remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
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
	log.Info("serving boot file", "file", name, "size", e.Size, "range", r.Header.Get("Range"))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", e.etag)
	http.ServeContent(w, r, path.Base(name), e.ModTime, f)
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
