package imagecache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testBytes is n deterministic pseudo-random bytes.
func testBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n:n]
}

func digestOf(b []byte) [32]byte { return sha256.Sum256(b) }

// testLogger writes the cache's logs to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// noSleep is Config.Sleep for tests: it records the waits and returns.
type noSleep struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *noSleep) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *noSleep) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waits)
}

// testConfig is a config on a fresh directory that never sleeps. It keeps
// one byte free rather than the default reserve, so that the tests do not
// depend on the free space of the machine's temporary directory.
func testConfig(t *testing.T) Config {
	ns := &noSleep{}
	return Config{
		Dir: t.TempDir(), Sleep: ns.sleep, Logger: testLogger(t),
		Metrics: prometheus.NewRegistry(), CheckpointBytes: 64 << 10, MinFree: 1,
	}
}

// openCache opens a cache and closes it at the end of the test.
func openCache(t *testing.T, cfg Config) *Cache {
	t.Helper()
	c, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// runCache runs c until the returned stop is called (or the test ends).
func runCache(t *testing.T, c *Cache) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitReady waits (bounded) for the digests and fails the test otherwise.
func waitReady(t *testing.T, c *Cache, ds ...[32]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Wait(ctx, ds...); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

// waitFailed waits (bounded) for d to fail and returns the reason.
func waitFailed(t *testing.T, c *Cache, d [32]byte) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.Wait(ctx, d)
	fe, ok := err.(*FailedError)
	if !ok {
		t.Fatalf("Wait = %v, want a *FailedError", err)
	}
	return fe.Reason
}

// origin is a test HTTP origin that records what it was asked.
type origin struct {
	srv   *httptest.Server
	mu    sync.Mutex
	reqs  []originReq
	serve func(w http.ResponseWriter, r *http.Request, n int)
}

type originReq struct {
	Range, IfRange string
}

func newOrigin(t *testing.T, serve func(w http.ResponseWriter, r *http.Request, n int)) *origin {
	o := &origin{serve: serve}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		n := len(o.reqs)
		o.reqs = append(o.reqs, originReq{Range: r.Header.Get("Range"), IfRange: r.Header.Get("If-Range")})
		o.mu.Unlock()
		o.serve(w, r, n)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *origin) url(name string) string { return o.srv.URL + "/" + name }

func (o *origin) requests() []originReq {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]originReq(nil), o.reqs...)
}

// serveBytes answers like a correct origin (ranges, If-Range) with etag.
func serveBytes(w http.ResponseWriter, r *http.Request, data []byte, etag string) {
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

// serveCut answers like serveBytes but the connection drops after limit
// bytes of the body.
func serveCut(w http.ResponseWriter, r *http.Request, data []byte, etag string, limit int64) {
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	http.ServeContent(w, r, "", time.Time{}, &cutReader{ReadSeeker: bytes.NewReader(data), left: limit})
}

type cutReader struct {
	io.ReadSeeker
	left int64
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.ReadSeeker.Read(p)
	c.left -= int64(n)
	return n, err
}

// get fetches url with the given headers and returns status, headers, body.
func get(t *testing.T, client *http.Client, method, url string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, resp.Header, body
}

// serveCache serves c's handler on a real loopback listener.
func serveCache(t *testing.T, c *Cache) (*httptest.Server, *http.Client) {
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	client := srv.Client()
	t.Cleanup(client.CloseIdleConnections)
	return srv, client
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// dirNames lists a directory's entries.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// newBenchOrigin serves data on loopback for benchmarks.
func newBenchOrigin(b *testing.B, data []byte) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveBytes(w, r, data, `"b"`)
	}))
	b.Cleanup(srv.Close)
	return srv.URL
}

// benchServer serves c on loopback with a client that keeps connections.
func benchServer(b *testing.B, c *Cache) (string, *http.Client) {
	srv := httptest.NewServer(c.Handler())
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(client.CloseIdleConnections)
	return srv.URL, client
}
