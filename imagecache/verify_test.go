package imagecache

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// reopen closes c and opens its directory again, on a fresh registry.
func reopen(t *testing.T, c *Cache, cfg Config) *Cache {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = prometheus.NewRegistry()
	return openCache(t, cfg)
}

// corrupt flips one byte of the file at path in place, as a stray write
// through the file system would, and puts its mode and mtime back.
func corrupt(t *testing.T, path string, at int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	f.ReadAt(b, at)
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.Chmod(path, fi.Mode().Perm())
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// A blob corrupted on disk while the cache was stopped is never served
// after the restart: it waits in StateVerifying (503), fails the hash
// again, is deleted, and the image, still wanted, is pulled again.
func TestRestartNeverServesACorruptedBlob(t *testing.T) {
	data := testBytes(85, 256<<10)
	d := digestOf(data)
	cfg := testConfig(t)
	c := readyCache(t, cfg, data)
	path := c.blobPath(d)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	corrupt(t, path, 1000)
	cfg.Metrics = prometheus.NewRegistry()
	c2 := openCache(t, cfg)
	srv, client := serveCache(t, c2)
	_, fast := fastServer(t, c2, ListenerConfig{})
	if st := c2.Images()[0].State; st != StateVerifying {
		t.Errorf("state after the restart: %v, want verifying", st)
	}
	for _, base := range []string{srv.URL, "http://" + fast} {
		if code, _, body := get(t, client, "GET", base+URLPath(d), nil); code != 503 || bytes.Equal(body[:min(len(body), 2000)], data[:min(len(body), 2000)]) && len(body) > 0 {
			t.Errorf("GET %s before verification: %d with %d bytes, want 503", base, code, len(body))
		}
	}
	runCache(t, c2)
	waitReady(t, c2, d)
	for _, base := range []string{srv.URL, "http://" + fast} {
		if code, _, body := get(t, client, "GET", base+URLPath(d), nil); code != 200 || !bytes.Equal(body, data) {
			t.Errorf("GET %s after the pull again: %d, the true bytes %t", base, code, bytes.Equal(body, data))
		}
	}
}

// A blob nobody touched is served right after the restart, without being
// hashed again: its file is the one the index recorded as verified.
func TestRestartTrustsAnUntouchedBlob(t *testing.T) {
	data := testBytes(86, 64<<10)
	cfg := testConfig(t)
	c := reopen(t, readyCache(t, cfg, data), cfg)
	if st := c.Images()[0].State; st != StateReady {
		t.Errorf("state after the restart: %v, want ready at once", st)
	}
}

// A blob the index holds no record of the file for (an index written
// before the records existed, or a crash between the commit's rename and
// the index write) is verified once, then served.
func TestRestartVerifiesABlobWithoutARecord(t *testing.T) {
	data := testBytes(87, 64<<10)
	d := digestOf(data)
	cfg := testConfig(t)
	c := readyCache(t, cfg, data)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	var idx map[string]any
	raw, err := os.ReadFile(c.indexPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	for _, im := range idx["images"].([]any) {
		delete(im.(map[string]any), "verified")
	}
	raw, _ = json.Marshal(idx)
	if err := os.WriteFile(c.indexPath(), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = prometheus.NewRegistry()
	c2 := openCache(t, cfg)
	if st := c2.Images()[0].State; st != StateVerifying {
		t.Fatalf("state after the restart: %v, want verifying", st)
	}
	runCache(t, c2)
	waitReady(t, c2, d)
	if fileExists(c2.partPath(d)) || !fileExists(c2.blobPath(d)) {
		t.Error("the blob was pulled again instead of verified in place")
	}
}
