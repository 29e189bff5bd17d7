package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/netlab"
)

// origin is an HTTP server on a lab host serving fixed files (HEAD and
// single ranges through http.ServeContent) and recording every request:
// the ramdisk kernel and initrd, and the image cache's origin.
type origin struct {
	base  string
	files map[string][]byte

	mu   sync.Mutex
	hits []hit
}

// hit is one request the origin answered.
type hit struct {
	At     time.Time
	Remote string
	Method string
	Path   string
	Range  string
	Status int
}

func (h hit) String() string {
	return fmt.Sprintf("%s %s %s %s %q -> %d", h.At.Format("15:04:05.000"), h.Remote, h.Method, h.Path, h.Range, h.Status)
}

// startOrigin serves files (path → bytes) on h's address, port 8081, until
// the test ends.
func startOrigin(t *testing.T, h *netlab.Host, files map[string][]byte) *origin {
	t.Helper()
	ln, err := h.Listen(h.Lab().Context(), "tcp4", h.Addr().String()+":8081")
	if err != nil {
		t.Fatal(err)
	}
	o := &origin{base: "http://" + ln.Addr().String(), files: files}
	srv := &http.Server{Handler: o, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("origin server: %v", err)
		}
	})
	return o
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	if data, ok := o.files[r.URL.Path]; ok {
		rec.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(rec, r, "", time.Time{}, bytes.NewReader(data))
	} else {
		http.NotFound(rec, r)
	}
	ip, _, _ := net.SplitHostPort(r.RemoteAddr)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.hits = append(o.hits, hit{At: time.Now(), Remote: ip, Method: r.Method, Path: r.URL.Path, Range: r.Header.Get("Range"), Status: rec.status})
}

// requests returns what the origin answered so far.
func (o *origin) requests() []hit {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]hit(nil), o.hits...)
}

// report lists every request, one per line.
func (o *origin) report() string {
	var lines []string
	for _, h := range o.requests() {
		lines = append(lines, h.String())
	}
	return strings.Join(lines, "\n")
}

// fetchedInOrder returns the first remote that made successful GETs of
// every path in order (other requests in between are fine), and when it
// made the last one.
func (o *origin) fetchedInOrder(paths ...string) (string, time.Time, bool) {
	next := map[string]int{}
	for _, h := range o.requests() {
		i := next[h.Remote]
		if h.Method != http.MethodGet || h.Status != http.StatusOK || h.Path != paths[i] {
			continue
		}
		next[h.Remote] = i + 1
		if i+1 == len(paths) {
			return h.Remote, h.At, true
		}
	}
	return "", time.Time{}, false
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
