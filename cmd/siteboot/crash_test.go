package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// throttled serves data with Range support at about rate bytes/s and counts
// the requests that resumed (carried a Range).
type throttled struct {
	data    []byte
	rate    int
	resumes atomic.Int32
}

func (o *throttled) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Range") != "" && r.Method == http.MethodGet {
		o.resumes.Add(1)
	}
	w.Header().Set("ETag", `"v1"`)
	http.ServeContent(w, r, "", fixedTime, &slowReader{r: bytes.NewReader(o.data), rate: o.rate})
}

// slowReader paces reads to about rate bytes/s.
type slowReader struct {
	r     *bytes.Reader
	rate  int
	start time.Time
	n     int
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.start.IsZero() {
		s.start = time.Now()
	}
	if due := s.start.Add(time.Duration(s.n) * time.Second / time.Duration(s.rate)); time.Until(due) > 0 {
		time.Sleep(time.Until(due))
	}
	n, err := s.r.Read(p)
	s.n += n
	return n, err
}

func (s *slowReader) Seek(off int64, whence int) (int64, error) { return s.r.Seek(off, whence) }

// kill -9 of the appliance at random points of a pull, then restarts: the
// image ends READY with the right digest, the pull resumed instead of
// starting over every time, and no response ever carried unverified bytes.
func TestKill9DuringPull(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the appliance several times (-short)")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	data := make([]byte, 24<<20)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	o := &throttled{data: data, rate: 12 << 20}
	srv := httptest.NewServer(o)
	defer srv.Close()

	dir := t.TempDir()
	sock := filepath.Join(dir, "siteboot.sock")
	httpAddr := freePort(t)
	cfg := writeFile(t, dir, "siteboot.yaml", "cache:\n  checkpoint: 1MiB\n")
	start := func() *os.Process {
		p := serveProcessOn(t, "--data-dir", dir, "--config", cfg, "--http-listen", httpAddr)
		waitSocket(t, sock)
		return p
	}
	p := start()
	if _, stderr, err := runCLI(t, nil, sock, "image", "add", "--url", srv.URL+"/img", "--sha256", digest); err != nil {
		t.Fatalf("image add: %v %s", err, stderr)
	}

	var bad atomic.Value
	stopProbe := probeCache(t, "http://"+httpAddr+"/cache/"+digest, sum, &bad)
	for i := range 4 {
		time.Sleep(time.Duration(200+rng.IntN(500)) * time.Millisecond)
		if err := p.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = p.Wait()
		t.Logf("kill %d done", i+1)
		p = start()
	}
	if out, stderr, err := runCLI(t, nil, sock, "--timeout", "60s", "image", "pull", "--wait", digest); err != nil {
		t.Fatalf("pull --wait: %v\n%s%s", err, out, stderr)
	}
	stopProbe()
	if v := bad.Load(); v != nil {
		t.Fatalf("a response carried wrong bytes: %v", v)
	}
	resp, err := http.Get("http://" + httpAddr + "/cache/" + digest)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || sha256.Sum256(got) != sum {
		t.Fatalf("final GET: %d, digest ok %t", resp.StatusCode, sha256.Sum256(got) == sum)
	}
	if o.resumes.Load() == 0 {
		t.Fatal("the pull never resumed with a Range request: every restart began from zero")
	}
	blob := filepath.Join(dir, "cache", "blobs", "sha256", digest)
	if b, err := os.ReadFile(blob); err != nil || sha256.Sum256(b) != sum {
		t.Fatalf("blob %s: %v", blob, err)
	}
	t.Logf("origin saw %d resumed requests", o.resumes.Load())
}

// probeCache GETs url (whole and ranges) until stopped; any 200/206 whose
// bytes differ from the image's is recorded in bad.
func probeCache(t *testing.T, url string, sum [32]byte, bad *atomic.Value) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: 10 * time.Second}
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			resp, err := client.Get(url)
			if err != nil {
				continue // the appliance is down between a kill and a restart
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusOK && err == nil && sha256.Sum256(body) != sum:
				bad.Store(fmt.Sprintf("200 with %d bytes of the wrong digest", len(body)))
			case resp.StatusCode == http.StatusPartialContent:
				bad.Store("206 to a request without Range")
			case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusNotFound:
				bad.Store(fmt.Sprintf("unexpected status %d: %s", resp.StatusCode, strings.TrimSpace(string(body))))
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
