package imagecache

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// skipOrFail skips for a missing privilege, or fails when CI demands the
// end-to-end tests (SITEBOOT_E2E=require).
func skipOrFail(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("SITEBOOT_E2E") == "require" {
		t.Fatalf("%s (SITEBOOT_E2E=require)", reason)
	}
	t.Skip(reason)
}

// smallDisk mounts a tmpfs of size bytes on a temporary directory.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size); err != nil {
		skipOrFail(t, "mount tmpfs: "+err.Error())
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func TestDiskFull(t *testing.T) {
	big, small := testBytes(80, 8<<20), testBytes(81, 1<<20)
	tests := []struct {
		name    string
		chunked bool // no Content-Length: the pull finds out while writing
		reason  string
	}{
		{"size announced", false, "not enough disk space"},
		{"size unknown", true, "no space left on device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			disk := smallDisk(t, "4m")
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
				b := big
				if r.URL.Path == "/small" {
					b = small
				}
				if tt.chunked {
					w.Write(b[:1])
					w.(http.Flusher).Flush()
					w.Write(b[1:])
					return
				}
				serveBytes(w, r, b, `"v1"`)
			})
			cfg := testConfig(t)
			cfg.Dir = filepath.Join(disk, "cache")
			c := openCache(t, cfg)
			srv, client := serveCache(t, c)
			runCache(t, c)
			d := digestOf(big)
			if err := c.Add(Want{URL: o.url("big"), SHA256: d}); err != nil {
				t.Fatal(err)
			}
			reason := waitFailed(t, c, d)
			if !strings.Contains(reason, tt.reason) {
				t.Errorf("reason %q, want containing %q", reason, tt.reason)
			}
			if names := append(dirNames(t, c.blobDir), dirNames(t, c.ingestDir)...); len(names) != 0 {
				t.Errorf("a failed pull left %v", names)
			}
			if code, _, _ := get(t, client, "GET", srv.URL+URLPath(d), nil); code != 404 {
				t.Errorf("GET of the failed image = %d, want 404", code)
			}
			// The space is back: a smaller image still fits.
			ds := digestOf(small)
			if err := c.Add(Want{URL: o.url("small"), SHA256: ds}); err != nil {
				t.Fatal(err)
			}
			waitReady(t, c, ds)
			if code, _, body := get(t, client, "GET", srv.URL+URLPath(ds), nil); code != 200 || !bytes.Equal(body, small) {
				t.Errorf("GET of the small image = %d with %d bytes", code, len(body))
			}
		})
	}
}
