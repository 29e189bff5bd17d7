package imagecache

import (
	"bytes"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Files put at a blob's path by someone on the appliance's own disk (not
// the network): none of them may hang a response or the verifier, and
// none is served as the image.

// A FIFO, or a symbolic link to an endless device, in place of a ready
// blob: the next response gets 503 at once (before, opening the FIFO
// waited for a writer, and the response with it), the verifier refuses
// the file without reading it (before, it waited on the FIFO, or hashed
// /dev/zero for ever), deletes it and the image is pulled again, and then
// served with its own bytes.
func TestBlobPathNotARegularFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(path string) error
	}{
		{"fifo", func(path string) error { return unix.Mkfifo(path, 0o444) }},
		{"link to /dev/zero", func(path string) error { return os.Symlink("/dev/zero", path) }},
	} {
		for _, fast := range []bool{true, false} {
			name := tc.name + "/net-http"
			if fast {
				name = tc.name + "/fast-path"
			}
			t.Run(name, func(t *testing.T) {
				data := testBytes(40, 256<<10)
				d := digestOf(data)
				c := readyCache(t, testConfig(t), data)
				addr := serveLimited(t, c, fast)
				path := c.blobPath(d)
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				if err := tc.plant(path); err != nil {
					t.Fatal(err)
				}
				// Should a reader be stuck on the FIFO, a writer that
				// comes and goes ends its wait, so that the test ends.
				t.Cleanup(func() {
					if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
						if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
							unix.Close(fd)
						}
					}
				})
				runCache(t, c)
				client := &http.Client{Timeout: 5 * time.Second}
				defer client.CloseIdleConnections()
				if code := rangeGet(t, client, addr, d, data, 0, 4096); code != http.StatusServiceUnavailable {
					t.Fatalf("GET with a %s at the blob's path: %d, want 503 while it is checked", tc.name, code)
				}
				waitReady(t, c, d)
				if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
					t.Fatalf("after the pull again the blob's path is %v (%v), want a regular file", fi, err)
				}
				if code := rangeGet(t, client, addr, d, data, 0, len(data)); code != http.StatusPartialContent {
					t.Fatalf("GET after the pull again: %d, want 206", code)
				}
			})
		}
	}
}

// A file renamed over a blob's path while its pull commits (after the
// verified file's rename, before its stamp is taken) is not adopted as the
// verified blob: the pull fails naming what happened, the file is
// deleted, and nothing of it is served. Before, its stamp was recorded and
// it was served as the image.
func TestBlobReplacedDuringCommit(t *testing.T) {
	data := testBytes(41, 256<<10)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), testBytes(42, 1000)) // an origin and a running cache to add to
	other := testBytes(43, len(data))
	c.commitRenamed = func(blob string) {
		fi, err := os.Stat(blob)
		if err != nil {
			t.Error(err)
			return
		}
		planted := blob + ".planted"
		if err := os.WriteFile(planted, other, 0o444); err != nil {
			t.Error(err)
			return
		}
		os.Chtimes(planted, fi.ModTime(), fi.ModTime()) // same size and mtime as the verified file
		if err := os.Rename(planted, blob); err != nil {
			t.Error(err)
		}
	}
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) { serveBytes(w, r, data, "") })
	if err := c.Add(Want{URL: o.url("img"), SHA256: d, Format: "iso"}); err != nil {
		t.Fatal(err)
	}
	addr := serveLimited(t, c, true)
	runCache(t, c)
	reason := waitFailed(t, c, d)
	if !strings.Contains(reason, "replaced on disk during the commit") {
		t.Errorf("failure reason %q does not say the file was replaced", reason)
	}
	if fileExists(c.blobPath(d)) {
		t.Error("the file put at the blob's path is still there")
	}
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "http://"+addr+URLPath(d), nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := new(bytes.Buffer)
	body.ReadFrom(resp.Body)
	if resp.StatusCode == http.StatusOK || bytes.Contains(body.Bytes(), other[:64]) {
		t.Fatalf("GET of the failed image: %d with %d bytes; the planted file must not be served", resp.StatusCode, body.Len())
	}
}
