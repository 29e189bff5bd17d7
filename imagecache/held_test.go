package imagecache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/httpserver"
	"github.com/siteboot/siteboot/internal/monitortest"
)

// openFilesOf counts this process's descriptors open on path, and those
// open on it after it was deleted.
func openFilesOf(t *testing.T, path string) (open, deleted int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd here: %v", err)
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		switch {
		case err != nil:
		case target == path:
			open++
		case target == path+" (deleted)":
			deleted++
		}
	}
	return open, deleted
}

// rangeGet GETs bytes [off, off+n) of d from addr and checks them against
// data; it returns the status.
func rangeGet(t *testing.T, client *http.Client, addr string, d [32]byte, data []byte, off, n int) int {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+URLPath(d), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("range %d+%d: %v", off, n, err)
	}
	if resp.StatusCode == http.StatusPartialContent && !bytes.Equal(body, data[off:off+n]) {
		t.Fatalf("range %d+%d: 206 with bytes that are not the image's", off, n)
	}
	return resp.StatusCode
}

// The fast path keeps one descriptor open on a ready blob and every
// response reads it at its own offset: ranges in any order, many at once,
// get the right bytes, through one descriptor. Evicting the image closes
// it: a deleted blob held open would keep its space.
func TestFastPathSharesOneHeldFile(t *testing.T) {
	data := testBytes(21, 3<<20)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	c.heldIdle = time.Hour // no idle sweep between the responses and the count
	addr := serveLimited(t, c, true)
	path := c.blobPath(d)
	if open, _ := openFilesOf(t, path); open != 0 {
		t.Fatalf("%d descriptors on the blob before any request", open)
	}
	errs := make(chan error, 8)
	for w := range 8 {
		go func() {
			client := &http.Client{}
			defer client.CloseIdleConnections()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range 40 {
				n := 1 + rng.IntN(300<<10)
				off := rng.IntN(len(data) - n + 1)
				if code := rangeGet(t, client, addr, d, data, off, n); code != http.StatusPartialContent {
					errs <- fmt.Errorf("range %d+%d: %d", off, n, code)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// A client has its last byte before the server's handler returns and
	// releases the blob: wait for the server's side to finish (a response
	// that never releases fails here). A response's own file closes before
	// its reader is uncounted, so after this only the held file is open.
	waitFor(t, func() bool { return c.Images()[0].Readers == 0 })
	if open, _ := openFilesOf(t, path); open != 1 {
		t.Errorf("%d descriptors on the blob after 320 responses, want the one held", open)
	}
	if err := c.Remove(d); err != nil {
		t.Fatal(err)
	}
	if len(c.Images()) != 0 || fileExists(path) {
		t.Fatalf("image still listed or on disk after Remove: %v", c.Images())
	}
	if open, deleted := openFilesOf(t, path); open+deleted != 0 {
		t.Errorf("after eviction: %d descriptors on the blob, %d on it deleted; want none", open, deleted)
	}
}

// A held blob that changes on disk is not served from: written in place,
// or replaced by another file of the same size and mtime, the next
// response finds the held file's ctime moved (a rename over a file
// unlinks it, which moves it too) and gets 503 while the blob is hashed
// again; the held descriptor is closed.
func TestHeldBlobChangedOnDisk(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"written in place", func(t *testing.T, path string) { corrupt(t, path, 1000) }},
		{"replaced", replaceBlob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := testBytes(22, 256<<10)
			d := digestOf(data)
			c := readyCache(t, testConfig(t), data)
			addr := serveLimited(t, c, true)
			client := &http.Client{}
			defer client.CloseIdleConnections()
			if code := rangeGet(t, client, addr, d, data, 0, 4096); code != http.StatusPartialContent {
				t.Fatalf("first GET: %d", code)
			}
			tc.change(t, c.blobPath(d))
			if code := rangeGet(t, client, addr, d, data, 0, len(data)); code != http.StatusServiceUnavailable {
				t.Fatalf("GET after the change: %d, want 503 while the blob is verified again", code)
			}
			if open, deleted := openFilesOf(t, c.blobPath(d)); open+deleted != 0 {
				t.Errorf("after the change was found: %d descriptors held on the blob, %d deleted; want none", open, deleted)
			}
		})
	}
}

// TestFastPathLeavesMonitorAsleep: a keep-alive range read through the
// fast path makes no runtime system call (the request read, the head's
// send, the cork, sendfile, the blob's check), so it does not wake the
// runtime's monitor: made the runtime's way each response woke it as
// often as every Go processor went idle between requests, and a woken
// monitor polls every 20 µs for a millisecond (internal/httpserver,
// rawcalls.go). The clients are curl processes, so that the only Go code
// here is the server's; the same requests with the runtime's calls and a
// blob opened per response are the comparison.
func TestFastPathLeavesMonitorAsleep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 4 curl processes of 200 requests each, twice")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skipf("no curl: %v", err)
	}
	data := testBytes(23, 4<<20)
	d := digestOf(data)
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.DiscardHandler) // a line per response would be a write each
	c := readyCache(t, cfg, data)
	addr := serveLimited(t, c, true)
	const clients, requests, size = 4, 200, 64 << 10
	url := "http://" + addr + URLPath(d)
	run := func(raw bool) float64 {
		defer httpserver.SetRawCalls(httpserver.SetRawCalls(raw))
		defer shareBlobs.Store(shareBlobs.Swap(raw))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var cmds []*exec.Cmd
		var outs []*os.File
		for i := range clients {
			// One connection per curl, requests one after another:
			// between them the server has nothing to do.
			args := []string{"-sS", "--fail"}
			for j := range requests {
				if j > 0 {
					args = append(args, "--next")
				}
				off := ((i*requests + j) * size) % (len(data) - size)
				args = append(args, "-r", fmt.Sprintf("%d-%d", off, off+size-1), "-o", "/dev/null",
					"-w", "%{http_code}\n", url)
			}
			// Its output goes to a file: a pipe would be read here,
			// with runtime system calls.
			out, err := os.Create(filepath.Join(t.TempDir(), "out"))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			cmd := exec.CommandContext(ctx, curl, args...)
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds, outs = append(cmds, cmd), append(outs, out)
		}
		// Counted from the last start; each Wait is one runtime call.
		before := monitortest.Sleeps(t)
		for i, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Fatalf("curl %d: %v", i, err)
			}
		}
		woke := monitortest.Sleeps(t) - before
		for i, out := range outs {
			b, err := os.ReadFile(out.Name())
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(string(b), "206\n"); got != requests {
				t.Fatalf("curl %d: %d of %d responses were 206:\n%.300s", i, got, requests, b)
			}
		}
		return float64(woke) / float64(clients*requests)
	}
	// A garbage collection wakes the monitor too; none runs while this
	// measures.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	run(true) // the blob held, its pages cached
	runtimeCalls := run(false)
	rawRun := run(true)
	t.Logf("monitor sleeps per response: %.4f with runtime system calls, %.4f with raw ones (%d responses each)",
		runtimeCalls, rawRun, clients*requests)
	if rawRun > 0.05 && rawRun > runtimeCalls/3 {
		t.Errorf("monitor sleeps per response: %.4f with raw calls, want at most a third of the %.4f with runtime system calls (or 0.05)", rawRun, runtimeCalls)
	}
}
