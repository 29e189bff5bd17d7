package imagecache

import (
	"bytes"
	"github.com/siteboot/siteboot/internal/metrictest"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// tickingClock advances one second per reading.
func tickingClock() func() time.Time {
	var n atomic.Int64
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time { return base.Add(time.Duration(n.Add(1)) * time.Second) }
}

// lockedPins is a Pinner tests change while the cache runs.
type lockedPins struct {
	mu  sync.Mutex
	set map[[32]byte]bool
}

func (p *lockedPins) Pinned(d [32]byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.set[d]
}

func (p *lockedPins) pin(d [32]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.set[d] = true
}

func TestEvictionLRU(t *testing.T) {
	imgs := map[string][]byte{}
	ds := map[string][32]byte{}
	wants := map[string]Want{}
	for i, n := range []string{"a", "b", "c", "d", "e", "f"} {
		imgs[n] = testBytes(uint64(40+i), 1000)
		ds[n] = digestOf(imgs[n])
	}
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
		serveBytes(w, r, imgs[strings.TrimPrefix(r.URL.Path, "/")], "")
	})
	for n := range imgs {
		wants[n] = Want{URL: o.url(n), SHA256: ds[n]}
	}
	pins := &lockedPins{set: map[[32]byte]bool{}}
	cfg := testConfig(t)
	cfg.Capacity, cfg.Now, cfg.Pins, cfg.Concurrency = 3000, tickingClock(), pins, 1
	c := openCache(t, cfg)
	srv, client := serveCache(t, c)
	runCache(t, c)
	spec := func(names ...string) {
		t.Helper()
		var ws []Want
		for _, n := range names {
			ws = append(ws, wants[n])
		}
		if err := c.SetWanted(ws); err != nil {
			t.Fatal(err)
		}
	}
	states := func() map[string]string {
		out := map[string]string{}
		for n, d := range ds {
			for _, in := range c.Images() {
				if in.SHA256 == d {
					out[n] = in.State.String()
				}
			}
		}
		return out
	}
	touch := func(n string) {
		if code, _, _ := get(t, client, "HEAD", srv.URL+URLPath(ds[n]), nil); code != 200 {
			t.Fatalf("HEAD %s = %d", n, code)
		}
	}

	spec("a", "b", "c")
	waitReady(t, c, ds["a"], ds["b"], ds["c"])
	spec() // all released, all fit
	touch("a")
	touch("c")
	spec("d") // b is the least recently used
	waitReady(t, c, ds["d"])
	if diff := cmp.Diff(map[string]string{"a": "ready", "c": "ready", "d": "ready"}, states()); diff != "" {
		t.Errorf("after pulling d (-want +got):\n%s", diff)
	}
	pins.pin(ds["a"]) // a is now the LRU but pinned
	spec("d", "e")
	waitReady(t, c, ds["e"])
	if diff := cmp.Diff(map[string]string{"a": "ready", "d": "ready", "e": "ready"}, states()); diff != "" {
		t.Errorf("after pulling e (-want +got):\n%s", diff)
	}
	spec("d", "e", "f") // nothing left to evict
	reason := waitFailed(t, c, ds["f"])
	if !strings.Contains(reason, "cache full") {
		t.Errorf("reason %q, want cache full", reason)
	}
	for _, n := range []string{"b", "c"} {
		if fileExists(c.blobPath(ds[n])) {
			t.Errorf("evicted %s still on disk", n)
		}
	}
	if got := metrictest.Counter(t, c.m.evictions); got != 2 {
		t.Errorf("evictions_total = %v, want 2", got)
	}
}

func TestEvictingWaitsForReaders(t *testing.T) {
	data := testBytes(50, 32<<20)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	srv, client := serveCache(t, c)
	resp, err := client.Get(srv.URL + URLPath(d))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	head := make([]byte, 1000)
	if _, err := io.ReadFull(resp.Body, head); err != nil {
		t.Fatal(err)
	}
	// The handler is now blocked in sendfile on full socket buffers.
	if err := c.Remove(d); err != nil {
		t.Fatal(err)
	}
	info := c.Images()[0]
	if info.State != StateEvicting || info.Readers != 1 {
		t.Fatalf("during the read: state %v with %d readers, want evicting with 1", info.State, info.Readers)
	}
	if code, _, _ := get(t, client, "GET", srv.URL+URLPath(d), nil); code != 404 {
		t.Errorf("a new GET of an evicting image = %d, want 404", code)
	}
	if c.Ready(d) {
		t.Errorf("Ready during eviction")
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(append(head, rest...), data) {
		t.Fatalf("the reader did not get the whole image (err %v, %d bytes)", err, len(head)+len(rest))
	}
	waitFor(t, func() bool { return len(c.Images()) == 0 })
	if fileExists(c.blobPath(d)) {
		t.Errorf("blob still there after its last reader")
	}
}
