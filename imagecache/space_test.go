package imagecache

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultMinFree(t *testing.T) {
	for _, tc := range []struct{ disk, want int64 }{
		{4 << 20, 1 << 30},
		{10 << 30, 1 << 30},
		{100 << 30, 5 << 30},
		{1 << 40, 1 << 40 / 100 * 5},
	} {
		if got := defaultMinFree(tc.disk); got != tc.want {
			t.Errorf("defaultMinFree(%d) = %d, want %d", tc.disk, got, tc.want)
		}
	}
}

// With cache.min_free unset the cache keeps the larger of 1 GiB and 5 % of
// its file system free, for the raft log beside it: on a 1 GiB + 16 MiB
// disk a pull of 24 MiB fails, before it writes when its size is known and
// as it crosses the reserve when it is not, and leaves nothing behind; a
// pull that fits still succeeds.
func TestDefaultMinFreeKeepsTheReserve(t *testing.T) {
	disk := smallDisk(t, "1040m")
	big, small := testBytes(82, 24<<20), testBytes(83, 4<<20)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch r.URL.Path {
		case "/known":
			serveBytes(w, r, big, `"k"`)
		case "/unknown": // no Content-Length: the pull finds out while writing
			w.Write(big[:1])
			w.(http.Flusher).Flush()
			w.Write(big[1:])
		default:
			serveBytes(w, r, small, `"s"`)
		}
	})
	cfg := testConfig(t)
	cfg.Dir, cfg.MinFree = filepath.Join(disk, "cache"), 0
	c := openCache(t, cfg)
	runCache(t, c)
	for _, path := range []string{"known", "unknown"} {
		// The same bytes under two digests' worth of wants: one at a time.
		d := digestOf(big)
		if err := c.Add(Want{URL: o.url(path), SHA256: d}); err != nil {
			t.Fatal(err)
		}
		reason := waitFailed(t, c, d)
		if !strings.Contains(reason, "not enough disk space") || !strings.Contains(reason, "keeping 1073741824 free") {
			t.Errorf("%s size: reason %q, want the 1 GiB reserve named", path, reason)
		}
		if names := append(dirNames(t, c.blobDir), dirNames(t, c.ingestDir)...); len(names) != 0 {
			t.Errorf("%s size: the failed pull left %v", path, names)
		}
		if err := c.Remove(d); err != nil {
			t.Fatal(err)
		}
	}
	ds := digestOf(small)
	if err := c.Add(Want{URL: o.url("small"), SHA256: ds}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ds)
	srv, client := serveCache(t, c)
	if code, _, body := get(t, client, "GET", srv.URL+URLPath(ds), nil); code != 200 || !bytes.Equal(body, small) {
		t.Errorf("GET of the image that fits = %d with %d bytes", code, len(body))
	}
}
