package imagecache

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/siteboot/siteboot/imagecache/serve"
)

// Churn: responses share the held file while it is dropped (changed on
// disk, verified again) over and over and other files are opened and closed
// (so a descriptor closed too early would be reused): every read must get
// the blob's bytes, and no descriptor may leak.
func TestHeldFileUnderChurn(t *testing.T) {
	data := testBytes(31, 1<<20)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	path := c.blobPath(d)
	b := blobs{c}
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, bytes.Repeat([]byte{0xEE}, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad, served, ebadf atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				bl, ok, err := b.AcquireShared(d)
				if err != nil || !ok {
					continue
				}
				off := (i * 4099) % (len(data) - len(buf))
				time.Sleep(time.Duration(i%3) * 50 * time.Microsecond)
				if _, err := bl.File.ReadAt(buf, int64(off)); err != nil {
					ebadf.Add(1)
				} else if !bytes.Equal(buf, data[off:off+len(buf)]) {
					bad.Add(1)
				}
				served.Add(1)
				bl.Release()
			}
		}()
	}
	wg.Add(2)
	go func() { // another file's descriptors, to take reused numbers
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if f, err := os.Open(other); err == nil {
				time.Sleep(20 * time.Microsecond)
				f.Close()
			}
		}
	}()
	go func() { // drop the held file again and again
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.mu.Lock()
			e := c.entries[d]
			st := e.stamp
			c.mu.Unlock()
			c.changedOnDisk(e, st, changedMsg)
			nst, err := stampOf(path)
			if err != nil {
				t.Error(err)
				return
			}
			c.verified(e, nst, true, nil)
			time.Sleep(100 * time.Microsecond)
		}
	}()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("served %d, wrong bytes %d, read errors %d", served.Load(), bad.Load(), ebadf.Load())
	if bad.Load() != 0 || ebadf.Load() != 0 {
		t.Fatal("a response read a closed or reused descriptor")
	}
	if r := c.Images()[0].Readers; r != 0 {
		t.Fatalf("readers %d after all released", r)
	}
	if open, del := openFilesOf(t, path); open > 1 || del != 0 {
		t.Fatalf("%d descriptors open on the blob (%d deleted), want at most the held one", open, del)
	}
	c.Close()
	if open, del := openFilesOf(t, path); open+del != 0 {
		t.Fatalf("%d descriptors open on the blob after Close", open+del)
	}
}

// A response that starts after Cache.Close keeps no held file: nothing
// would ever close it.
func TestNoHeldFileAfterClose(t *testing.T) {
	data := testBytes(32, 64<<10)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	b := blobs{c}
	bl, ok, err := b.AcquireShared(d) // in flight across Close
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	c.Close()
	bl.Release()
	if open, _ := openFilesOf(t, c.blobPath(d)); open != 0 {
		t.Fatalf("%d open after Close and the last release", open)
	}
	bl, ok, err = b.AcquireShared(d) // a late response
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	bl.Release()
	if open, _ := openFilesOf(t, c.blobPath(d)); open != 0 {
		t.Errorf("a response after Close left %d descriptors open on the blob for good", open)
	}
}

// resident tells a range whose pages are all in memory and read from one
// with a page that is not: the fast path's sendfile is raw only for the
// first (a raw call that waits for the disk holds its Go processor).
func TestHeldResident(t *testing.T) {
	const size = 1 << 20
	p := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cache{}
	h := c.newHeld(&entry{}, f, stamp{}, size, true)
	defer h.close()
	if h.mem == nil {
		t.Fatal("the file was not mapped")
	}
	fd := int(f.Fd())
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Skipf("fadvise: %v", err)
	}
	// Told apart from resident itself: a read that must not wait.
	if _, err := unix.Preadv2(fd, [][]byte{make([]byte, 512)}, size-512, unix.RWF_NOWAIT); err != unix.EAGAIN {
		t.Skipf("the file system kept the pages (%s is not on a disk; preadv2 RWF_NOWAIT: %v)", p, err)
	}
	if h.resident(0, size) {
		t.Error("resident(0, size) = true right after the pages were dropped")
	}
	// Read the first half in, and drop the second again (readahead may
	// have brought it): the half is in memory, the whole is not.
	if _, err := f.ReadAt(make([]byte, size/2), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(fd, size/2, size/2, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		off, n int64
		want   bool
	}{
		{0, size / 2, true},
		{100, 5000, true},
		{size/2 - 1, 1, true},
		{size/2 - 1, 2, false},
		{0, size, false},
		{size - 10, 10, false},
		{0, 0, false},
		{-1, 10, false},
		{size - 10, 11, false}, // past the end
	} {
		if got := h.resident(tc.off, tc.n); got != tc.want {
			t.Errorf("resident(%d, %d) = %t, want %t", tc.off, tc.n, got, tc.want)
		}
	}
	// More pages than one look covers: never resident, even in memory.
	big := filepath.Join(t.TempDir(), "big")
	n := int64(maxResidentPages+1) * int64(os.Getpagesize())
	if err := os.WriteFile(big, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := os.Open(big)
	if err != nil {
		t.Fatal(err)
	}
	hg := c.newHeld(&entry{}, g, stamp{}, n, true)
	defer hg.close()
	if _, err := g.ReadAt(make([]byte, n), 0); err != nil {
		t.Fatal(err)
	}
	if !hg.resident(0, n-int64(os.Getpagesize())) || hg.resident(0, n) {
		t.Errorf("resident of %d pages = %t, of %d = %t; want true, false", maxResidentPages, hg.resident(0, n-int64(os.Getpagesize())), maxResidentPages+1, hg.resident(0, n))
	}
}

// acquireShared takes d's shared blob, failing the test if it cannot.
func acquireShared(t *testing.T, c *Cache, d [32]byte) serve.Blob {
	t.Helper()
	bl, ok, err := blobs{c}.AcquireShared(d)
	if !ok || err != nil {
		t.Fatalf("AcquireShared: ok %v, err %v", ok, err)
	}
	return bl
}

// waitHeldClosed waits up to 30 s for no descriptor and no mapping of
// path to be left; what names the file in the failure.
func waitHeldClosed(t *testing.T, path, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, _ := openFilesOf(t, path)
		if n == 0 && mappedOf(t, path) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still open 30 s after its last response (%d descriptors)", what, n)
		}
	}
}

// mappedOf counts this process's mappings of path (also once deleted).
func mappedOf(t *testing.T, path string) int {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps here: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.HasSuffix(line, " "+path) || strings.HasSuffix(line, " "+path+" (deleted)") {
			n++
		}
	}
	return n
}

// A held file nobody reads closes at the second sweep after its last
// response: the descriptors open after a boot storm are those open before
// it. A file some response still reads stays open until that response
// and a sweep after it.
func TestHeldFileClosedWhenIdle(t *testing.T) {
	data := testBytes(33, 64<<10)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	c.heldIdle = time.Hour // the test sweeps
	path := c.blobPath(d)
	openNow := func() int { n, _ := openFilesOf(t, path); return n }

	bl := acquireShared(t, c, d)
	bl.Release()
	c.sweepHeld() // it was used since the last sweep: kept
	if n := openNow(); n != 1 {
		t.Fatalf("%d descriptors on the blob after one sweep; want the held one", n)
	}
	c.sweepHeld()
	if n, m := openNow(), mappedOf(t, path); n != 0 || m != 0 {
		t.Fatalf("%d descriptors and %d mappings of the blob after two sweeps with no response; want 0", n, m)
	}

	bl = acquireShared(t, c, d) // opens it again, and reads across sweeps
	c.sweepHeld()
	c.sweepHeld()
	buf := make([]byte, 4096)
	if _, err := bl.File.ReadAt(buf, 8192); err != nil || !bytes.Equal(buf, data[8192:8192+4096]) {
		t.Fatalf("a response's read across two sweeps: %v", err)
	}
	bl.Release()
	if n := openNow(); n != 1 {
		t.Fatalf("%d descriptors after the response; want the held one", n)
	}
	c.sweepHeld()
	if n, m := openNow(), mappedOf(t, path); n != 0 || m != 0 {
		t.Fatalf("%d descriptors and %d mappings after a sweep with no response; want 0", n, m)
	}
}

// The cache sweeps by itself, with or without Run, while it holds a file.
func TestHeldFileClosesByItself(t *testing.T) {
	data := testBytes(34, 64<<10)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	c.heldIdle = 20 * time.Millisecond
	bl := acquireShared(t, c, d)
	bl.Release()
	path := c.blobPath(d)
	waitHeldClosed(t, path, "the held file of an idle image")
	c.mu.Lock()
	armed := c.sweeps
	c.mu.Unlock()
	if armed {
		t.Error("a sweep is still armed with no held file left")
	}

	// A file a response reads across sweeps closes after it, by itself.
	bl = acquireShared(t, c, d)
	time.Sleep(10 * c.heldIdle)
	if n, _ := openFilesOf(t, path); n != 1 {
		t.Fatalf("%d descriptors while a response reads; want the held one", n)
	}
	bl.Release()
	waitHeldClosed(t, path, "a file read across sweeps")
}

// A blob deleted by hand once its held file closed is sent back to be
// verified, and so pulled again, not answered with an error for good.
func TestHeldBlobDeletedByHand(t *testing.T) {
	data := testBytes(35, 64<<10)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	c.heldIdle = time.Hour
	b := blobs{c}
	bl := acquireShared(t, c, d)
	bl.Release()
	c.sweepHeld()
	c.sweepHeld()
	if err := os.Remove(c.blobPath(d)); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := b.AcquireShared(d); ok || err != nil {
		t.Fatalf("AcquireShared of a blob deleted by hand: ok %v, err %v; want not ok, no error (verify again)", ok, err)
	}
	if !b.Pending(d) {
		t.Fatal("a blob deleted by hand is not on its way back to ready")
	}
	runCache(t, c)
	waitReady(t, c, d)
	bl = acquireShared(t, c, d) // after the pull again
	defer bl.Release()
	// The opener that found it gone let go of opening it.
	if !heldMapped(c, d) {
		t.Error("after the pull again, the response did not become the mapped held file")
	}
	buf := make([]byte, len(data))
	if _, err := bl.File.ReadAt(buf, 0); err != nil || !bytes.Equal(buf, data) {
		t.Fatalf("after the pull again: %v", err)
	}
}

// A blob missing because its whole directory is (unmounted, moved) is an
// error, and the image stays ready: nothing is pulled again for it.
func TestHeldBlobDirectoryGone(t *testing.T) {
	data := testBytes(36, 64<<10)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	c.heldIdle = time.Hour
	moved := c.blobDir + ".moved"
	if err := os.Rename(c.blobDir, moved); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := (blobs{c}).AcquireShared(d); ok || err == nil {
		t.Fatalf("AcquireShared with the blob directory gone: ok %v, err %v; want an error", ok, err)
	}
	if st := c.Images()[0].State; st != StateReady {
		t.Fatalf("state %v with the blob directory gone; want it left ready", st)
	}
	if err := os.Rename(moved, c.blobDir); err != nil {
		t.Fatal(err)
	}
	acquireShared(t, c, d).Release() // with the directory back
	// The opener that failed let go of opening it.
	if !heldMapped(c, d) {
		t.Fatal("with the directory back, the response did not become the mapped held file")
	}
}

// heldMapped reports whether d's entry holds a file, mapped for mincore.
func heldMapped(c *Cache, d [32]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[d]
	return e != nil && e.held != nil && e.held.mem != nil
}

// The first responses of a storm all find no held file: only one of them
// maps the blob (for mincore) and becomes the held file; the others read
// their own unmapped files. Each mapping the whole image would, on a
// 32-bit system, take the address space the runtime needs.
func TestHeldFileMappedOnce(t *testing.T) {
	data := testBytes(35, 1<<20)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	c.heldIdle = time.Hour // the test looks at the held file
	path := c.blobPath(d)

	if _, err := os.ReadFile(path); err != nil { // in memory, for mincore
		t.Fatal(err)
	}

	const n = 4
	arrived, release := make(chan struct{}, n), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	var running sync.WaitGroup
	testHookHeldOpened = func() { arrived <- struct{}{}; <-release }
	t.Cleanup(func() {
		// Should the test fail early, every response is let go and has
		// returned before the hook is cleared: one may not have read it yet.
		open()
		running.Wait()
		testHookHeldOpened = nil
	})

	got := make(chan serve.Blob, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		running.Add(1)
		go func() {
			defer running.Done()
			bl, ok, err := blobs{c}.AcquireShared(d)
			if !ok || err != nil {
				errs <- fmt.Errorf("AcquireShared: ok %v, err %v", ok, err)
				return
			}
			got <- bl
		}()
	}
	for i := 0; i < n; i++ { // all opened before any is offered as the held one
		select {
		case <-arrived:
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d responses opened the blob", i, n)
		}
	}
	maps := mappedOf(t, path)
	open()
	if maps != 1 {
		t.Errorf("%d responses opening the blob at once mapped it %d times, want once", n, maps)
	}
	resident := 0
	for i := 0; i < n; i++ {
		bl := <-got
		if bl.InMemory != nil && bl.InMemory(0, int64(len(data))) {
			resident++
		}
		bl.Release()
	}
	if resident != 1 {
		t.Errorf("%d of the first responses could ask mincore, want 1 (the held file)", resident)
	}
	if !heldMapped(c, d) {
		t.Fatal("no mapped held file after the first responses")
	}
	if n, _ := openFilesOf(t, path); n != 1 || mappedOf(t, path) != 1 {
		t.Errorf("after the first responses: %d descriptors, %d mappings of the blob, want 1 and 1", n, mappedOf(t, path))
	}
	bl := acquireShared(t, c, d) // later responses share the held file
	if bl.InMemory == nil || !bl.InMemory(0, int64(len(data))) {
		t.Error("a later response cannot ask mincore")
	}
	bl.Release()
}
