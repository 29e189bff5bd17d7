package imagecache

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A blob whose file changes while the cache runs (written in place with
// its mtime put back, or replaced by another file of the same size) is
// never served: the next request finds it is not the file that was
// verified, gets 503, and the blob is hashed again; it fails, is deleted,
// and the image, still wanted, is pulled again.
func TestBlobChangedWhileRunningIsNotServed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"written in place", func(t *testing.T, path string) { corrupt(t, path, 1000) }},
		{"replaced", replaceBlob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := testBytes(88, 256<<10)
			d := digestOf(data)
			c := readyCache(t, testConfig(t), data)
			srv, client := serveCache(t, c)
			_, fast := fastServer(t, c, ListenerConfig{})
			tc.change(t, c.blobPath(d))
			for _, base := range []string{"http://" + fast, srv.URL} {
				code, _, body := get(t, client, "GET", base+URLPath(d), nil)
				if code == 200 && !bytes.Equal(body, data) {
					t.Fatalf("GET %s after the change: 200 with bytes that are not the image's", base)
				}
				if code != 503 {
					t.Errorf("GET %s after the change: %d, want 503 while it is verified again", base, code)
				}
			}
			runCache(t, c)
			waitReady(t, c, d)
			for _, base := range []string{"http://" + fast, srv.URL} {
				if code, _, body := get(t, client, "GET", base+URLPath(d), nil); code != 200 || !bytes.Equal(body, data) {
					t.Errorf("GET %s after the pull again: %d, the true bytes %t", base, code, bytes.Equal(body, data))
				}
			}
		})
	}
}

// replaceBlob renames another file of the same size and mtime over the
// blob at path.
func replaceBlob(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(filepath.Dir(path), "..", "other")
	if err := os.WriteFile(other, testBytes(99, int(fi.Size())), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(other, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
}
