package imagecache

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func TestReopenKeepsState(t *testing.T) {
	a, b := testBytes(60, 2000), testBytes(61, 3000)
	cfg := testConfig(t)
	c := readyCache(t, cfg, a, b)
	if err := c.SetWanted([]Want{{URL: "https://cat.example/b", SHA256: digestOf(b), Format: "raw"}}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(c.indexPath())
	if err != nil {
		t.Fatal(err)
	}
	srv, client := serveCache(t, c)
	for range 20 {
		get(t, client, "GET", srv.URL+URLPath(digestOf(a)), map[string]string{"Range": "bytes=0-511"})
	}
	after, _ := os.ReadFile(c.indexPath())
	if !bytes.Equal(before, after) {
		t.Errorf("GETs rewrote the index; last-used times must wait for a flush")
	}
	// A handler releases its image just after the client has the last byte:
	// wait for that before taking the state to compare.
	waitFor(t, func() bool {
		for _, in := range c.Images() {
			if in.Readers != 0 {
				return false
			}
		}
		return true
	})
	want := c.Images()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = prometheus.NewRegistry()
	c2 := openCache(t, cfg)
	if diff := cmp.Diff(want, c2.Images()); diff != "" {
		t.Errorf("Images after reopening (-want +got):\n%s", diff)
	}
}

func TestOpenRefusesASecondUser(t *testing.T) {
	cfg := testConfig(t)
	openCache(t, cfg)
	cfg.Metrics = nil
	if c, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "in use") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("second Open = %v, want in use", err)
	}
}

// layout writes files under dir.
func layout(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenScrubs(t *testing.T) {
	good, liar, gone, resume, evicted, resized, other := testBytes(70, 100), testBytes(71, 100),
		testBytes(72, 100), testBytes(73, 100), testBytes(74, 100), testBytes(75, 100), testBytes(76, 100)
	h := func(b []byte) string { return hexOf(digestOf(b)) }
	idx := indexFile{Version: 1, Images: []indexImage{
		{SHA256: h(gone), URL: "http://o/gone", State: idxReady, Size: 100},
		{SHA256: h(resume), URL: "http://o/resume", State: idxWanted, Added: true},
		{SHA256: h(evicted), URL: "http://o/evicted", State: idxEvicting, Size: 100},
		{SHA256: h(resized), URL: "http://o/resized", State: idxReady, Size: 99},
	}}
	raw, _ := json.Marshal(idx)
	cfg := testConfig(t)
	layout(t, cfg.Dir, map[string][]byte{
		"index.json":                        raw,
		"index.json.tmp":                    []byte("torn"),
		"blobs/sha256/" + h(good):           good,
		"blobs/sha256/" + h(liar):           other,
		"blobs/sha256/" + h(evicted):        evicted,
		"blobs/sha256/" + h(resized):        resized,
		"blobs/sha256/junk.tmp":             []byte("x"),
		"ingest/" + h(resume) + ".part":     resume[:10],
		"ingest/" + h(resume) + ".ckpt":     []byte("{}"),
		"ingest/" + h(other) + ".part":      other[:10],
		"ingest/" + h(resume) + ".ckpt.tmp": []byte("torn"),
		"ingest/stray":                      []byte("x"),
	})
	c := openCache(t, cfg)
	type result struct {
		Blobs, Ingest, Dir []string
		States             map[[32]byte]string
	}
	want := result{
		Blobs:  []string{h(good)},
		Ingest: []string{h(resume) + ".ckpt", h(resume) + ".part"},
		Dir:    []string{"blobs", "index.json", "ingest", "lock"},
		States: map[[32]byte]string{digestOf(good): "ready", digestOf(resume): "queued+added"},
	}
	got := result{dirNames(t, c.blobDir), dirNames(t, c.ingestDir), dirNames(t, cfg.Dir), statesOf(c)}
	slices.Sort(got.Ingest)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after Open (-want +got):\n%s", diff)
	}
}

func TestOpenRebuildsFromBlobsWhenTheIndexIsCorrupt(t *testing.T) {
	good := testBytes(77, 100)
	cfg := testConfig(t)
	layout(t, cfg.Dir, map[string][]byte{
		"index.json":                            []byte("{not json"),
		"blobs/sha256/" + hexOf(digestOf(good)): good,
	})
	c := openCache(t, cfg)
	if diff := cmp.Diff(map[[32]byte]string{digestOf(good): "ready"}, statesOf(c)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
