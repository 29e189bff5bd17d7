package main

import (
	"bytes"
	"go.uber.org/goleak"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeBlob writes size pseudo-random bytes to a file in a test dir.
func writeBlob(t *testing.T, size int) (string, []byte) {
	t.Helper()
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	path := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// serveBytes is a real HTTP server on 127.0.0.1 answering ranges of data
// with net/http's own range support.
func serveBytes(t *testing.T, data []byte) string {
	t.Helper()
	return serveFunc(t, func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "blob", time.Time{}, bytes.NewReader(data))
	})
}

func serveFunc(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/cache/blob"
}

func testOptions(url string) options {
	return options{URL: url, Clients: 4, Duration: 200 * time.Millisecond, RangeSize: 4096,
		Timeout: 5 * time.Second, VerifyEvery: 1, Seed: 7}
}

// TestMain fails the package's tests when one of them leaks a goroutine.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
