package imagecache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
		{"socket", plantSocket},
		{"sparse file of 1 TiB", plantSparse},
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
				if err := tc.plant(path); errors.Is(err, unix.EFBIG) {
					t.Skipf("no sparse file that large here: %v", err)
				} else if err != nil {
					t.Fatal(err)
				}
				runCache(t, c)
				// Should a reader be stuck on the FIFO, a writer that
				// comes and goes ends its wait, so that the test ends:
				// this runs before the cache is stopped (cleanups run
				// last first), which waits for its verifier.
				t.Cleanup(func() {
					if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
						if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
							unix.Close(fd)
						}
					}
				})
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

// plantSparse puts a sparse file claiming 1 TiB at path.
func plantSparse(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o444)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Truncate(path, 1<<40)
}

// plantSocket puts a unix socket at path. It is bound through the
// directory's descriptor (/proc/self/fd/N/name: a socket's name is at most
// 107 bytes, a test's directory may be longer) and renamed into place.
func plantSocket(path string) error {
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	name := "sock.tmp"
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), name)}); err != nil {
		return err
	}
	return os.Rename(filepath.Join(filepath.Dir(path), name), path)
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

// A symbolic or hard link at a pull's ingest path is not written
// through: the pull writes a file of its own, and the file the link names
// keeps its bytes and mode (before, the image was written over it and it
// was made read-only; through a hard link it even became the served
// blob).
func TestIngestPathLink(t *testing.T) {
	for _, tc := range []struct {
		name string
		link func(victim, part string) error
	}{
		{"symbolic", os.Symlink},
		{"hard", os.Link},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := testBytes(44, 256<<10)
			d := digestOf(data)
			cfg := testConfig(t)
			c := openCache(t, cfg)
			victim := filepath.Join(cfg.Dir, "victim") // on the cache's file system, for the hard link
			if err := os.WriteFile(victim, []byte("not the cache's to write"), 0o644); err != nil {
				t.Fatal(err)
			}
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) { serveBytes(w, r, data, "") })
			if err := c.Add(Want{URL: o.url("img"), SHA256: d, Format: "iso"}); err != nil {
				t.Fatal(err)
			}
			if err := tc.link(victim, c.partPath(d)); err != nil {
				t.Fatal(err)
			}
			runCache(t, c)
			waitReady(t, c, d)
			got, err := os.ReadFile(victim)
			if err != nil || string(got) != "not the cache's to write" {
				t.Errorf("the file the link names now holds %d bytes (%v)", len(got), err)
			}
			if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o644 {
				t.Errorf("the file the link names: %v, %v; want mode 0644", fi, err)
			}
			if blob, err := os.ReadFile(c.blobPath(d)); err != nil || !bytes.Equal(blob, data) {
				t.Errorf("the blob is not the image (%v)", err)
			}
		})
	}
}

// An unlisted blob (the index lost) that is a sparse file claiming more
// than its file system holds is deleted at Open, not hashed: a terabyte
// of zeros would keep Open hashing for the best part of an hour.
func TestAdoptSparseBlob(t *testing.T) {
	cfg := testConfig(t)
	c := openCache(t, cfg)
	d := digestOf([]byte("not this"))
	path := c.blobPath(d)
	c.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	fs, err := diskSize(c.blobDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fs+1<<30); err != nil {
		t.Skipf("no sparse file larger than the file system here: %v", err)
	}
	type opened struct {
		c   *Cache
		err error
	}
	done := make(chan opened, 1)
	cfg.Metrics = nil
	go func() {
		c2, err := Open(cfg)
		done <- opened{c2, err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			t.Fatal(o.err)
		}
		defer o.c.Close()
		if n := len(o.c.Images()); n != 0 {
			t.Errorf("%d images after Open, want none", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Open still hashing the sparse file after 20 s")
	}
	if fileExists(path) {
		t.Error("the sparse file is still in the blob directory")
	}
}

// On a compressing file system (btrfs compress=, ZFS lz4) a mostly-zero
// image can be larger than the file system it is on. When the index
// recorded its size (ready, or asked for by the pull), verifying it again
// (the file's stamp changed) hashes it and keeps it; before, the bound
// for files nothing vouches for deleted it, to be pulled again at every
// re-verification. A blob whose size no index entry recorded (a crash
// between a pull's commit and the index write, size not asked) keeps the
// bound, across a restart before it is verified too (the index must not
// turn the file's claim into a recorded size). A recorded size over the
// cache's capacity is not hashed: no pull would take such an image in,
// and a sparse file of terabytes would keep the verifier for hours. A
// sparse file on a small tmpfs stands in for the compressed one.
func TestVerifyImageLargerThanDisk(t *testing.T) {
	const size = 2 << 20 // on a 1 MiB file system
	d := digestOf(make([]byte, size))
	tests := []struct {
		name     string
		im       indexImage
		size     int64
		capacity int64
		restart  bool // Open and Close once before the run that verifies
		kept     bool
	}{
		{"recorded ready", indexImage{State: idxReady, Size: size}, size, 0, false, true},
		{"recorded ready, a restart first", indexImage{State: idxReady, Size: size}, size, 0, true, true},
		{"size asked, crash before the index said ready", indexImage{State: idxWanted, WantSize: size}, size, 0, false, true},
		{"size neither recorded nor asked", indexImage{State: idxWanted}, size, 0, false, false},
		{"size neither recorded nor asked, a restart first", indexImage{State: idxWanted}, size, 0, true, false},
		{"recorded 8 TiB, over the capacity", indexImage{State: idxReady, Size: 8 << 40}, 8 << 40, 1 << 30, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Dir, cfg.Capacity = filepath.Join(smallDisk(t, "1m"), "cache"), tt.capacity
			c := openCache(t, cfg)
			c.Close()
			path := c.blobPath(d)
			sparseFile(t, path, tt.size)
			if fs, err := diskSize(c.blobDir); err != nil || fs >= size {
				t.Fatalf("file system of %d bytes (%v), want under %d", fs, err, size)
			}
			im := tt.im
			im.SHA256 = hexOf(d)
			writeIndex(t, c, im)
			cfg.Metrics = nil
			if tt.restart {
				c1 := openCache(t, cfg) // stopped before the verifier got to it
				if err := c1.Close(); err != nil {
					t.Fatal(err)
				}
			}
			c2 := openCache(t, cfg)
			if got := c2.Images(); len(got) != 1 || got[0].State != StateVerifying {
				t.Fatalf("after Open: %+v, want the image verifying", got)
			}
			runCache(t, c2)
			waitFor(t, func() bool {
				got := c2.Images()
				return len(got) == 0 || got[0].State != StateVerifying
			})
			got := c2.Images()
			switch {
			case tt.kept && (len(got) != 1 || got[0].State != StateReady):
				t.Errorf("images %+v, want the image ready", got)
			case tt.kept && !fileExists(path):
				t.Error("the blob was deleted")
			case !tt.kept && (len(got) != 0 || fileExists(path)):
				t.Errorf("images %+v, blob there: %v; want it refused unread and deleted", got, fileExists(path))
			}
		})
	}
}

// An operator may lower the capacity below an image the site still
// boots: it stays ready, and when it must be verified again (its file's
// ctime moved: a chmod, a backup tool's hard link) it is hashed and kept,
// not deleted unverified for being over the capacity (a pull of it would
// then be refused, and the image fail).
func TestCapacityLoweredKeepsWantedImage(t *testing.T) {
	data := testBytes(7, 256<<10)
	d := digestOf(data)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) { serveBytes(w, r, data, `"v1"`) })
	cfg := testConfig(t)
	c := openCache(t, cfg)
	stop := runCache(t, c)
	if err := c.Add(Want{URL: o.url("img"), SHA256: d}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, d)
	stop()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Metrics, cfg.Capacity = nil, 128<<10
	if err := os.Chmod(c.blobPath(d), 0o400); err != nil { // the ctime moves
		t.Fatal(err)
	}
	c2 := openCache(t, cfg)
	if got := c2.Images(); len(got) != 1 || got[0].State != StateVerifying {
		t.Fatalf("after Open: %+v, want the image verifying", got)
	}
	runCache(t, c2)
	waitFor(t, func() bool { got := c2.Images(); return len(got) == 1 && got[0].State != StateVerifying })
	if got := c2.Images(); got[0].State != StateReady || !fileExists(c2.blobPath(d)) || len(o.requests()) != 1 {
		t.Errorf("image %v (%s), blob there %v, %d pulls; want it ready, kept, pulled once",
			got[0].State, got[0].Reason, fileExists(c2.blobPath(d)), len(o.requests()))
	}
}

// A blob evicted while the verifier hashes it (Remove, a release that
// settles the capacity) stops being hashed: before, the verifier read the
// deleted file to its end, every other blob waiting behind it (a wanted
// one answered 503 meanwhile) and the file's blocks held though eviction
// counted them free. A sparse blob of 64 GiB makes the hash long.
func TestEvictedWhileVerifyingStopsHashing(t *testing.T) {
	const bigSize = 64 << 30
	small := testBytes(91, 64<<10)
	dBig, dSmall := digestOf([]byte("big")), digestOf(small)
	cfg := testConfig(t)
	c := openCache(t, cfg)
	c.Close()
	sparseFile(t, c.blobPath(dBig), bigSize)
	if err := os.WriteFile(c.blobPath(dSmall), small, 0o444); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	data, err := json.Marshal(indexFile{Version: indexVersion, Images: []indexImage{ // the big one verified first
		{SHA256: hexOf(dBig), State: idxReady, Size: bigSize, Added: true, LastUsed: now},
		{SHA256: hexOf(dSmall), State: idxReady, Size: int64(len(small)), Added: true, LastUsed: now.Add(-time.Hour)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.indexPath(), data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = nil
	c2 := openCache(t, cfg)
	runCache(t, c2)
	waitFor(t, func() bool {
		for _, in := range c2.Images() {
			if in.SHA256 == dBig && in.Done > 0 {
				return true
			}
		}
		return false
	})
	if err := c2.Remove(dBig); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c2.Wait(ctx, dSmall); err != nil {
		t.Fatalf("3 s after the big image was removed the small one is not ready: %v", err)
	}
}

// An image whose unvouched blob failed verification and was pulled again
// has the size its pull recorded: verified again later (its file
// changed), it is read at that size, not bounded as a file nothing vouches
// for (on a compressing file system it would be deleted and pulled again
// each time).
func TestRepulledImageSizeVouched(t *testing.T) {
	const size = 2 << 20
	data := make([]byte, size) // a mostly-zero image
	d := digestOf(data)
	cfg := testConfig(t)
	disk := smallDisk(t, "4m")
	cfg.Dir = filepath.Join(disk, "cache")
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) { serveBytes(w, r, data, `"v1"`) })
	c := openCache(t, cfg)
	c.Close()
	// A crash between a pull's commit and the index write (no size asked),
	// and the blob then damaged: it fails verification and is pulled again.
	if err := os.WriteFile(c.blobPath(d), []byte("damaged"), 0o444); err != nil {
		t.Fatal(err)
	}
	writeIndex(t, c, indexImage{SHA256: hexOf(d), URL: o.url("img"), State: idxWanted, Added: true})
	cfg.Metrics = nil
	c2 := openCache(t, cfg)
	stop := runCache(t, c2)
	waitFor(t, func() bool { got := c2.Images(); return len(got) == 1 && got[0].State == StateReady })
	stop()
	// The file system now compresses (stand-in: the blob made sparse, the
	// tmpfs shrunk under the image), and the blob's stamp changed: the
	// next request sends it back to be verified.
	sparseFile(t, c2.blobPath(d), size)
	if err := unix.Mount("tmpfs", disk, "tmpfs", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
		t.Fatalf("remount the tmpfs smaller: %v", err)
	}
	if _, ok, err := (blobs{c2}).Acquire(d); ok || err != nil {
		t.Fatalf("Acquire of a changed blob: ok %v, err %v; want neither (verify it again)", ok, err)
	}
	runCache(t, c2)
	waitFor(t, func() bool { got := c2.Images(); return len(got) == 1 && got[0].State != StateVerifying })
	if got := c2.Images(); got[0].State != StateReady || len(o.requests()) != 1 {
		t.Errorf("image %v after %d pulls, want ready after the one pull", got[0].State, len(o.requests()))
	}
}

// sparseFile makes path a file of size bytes with nothing written.
func sparseFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

// writeIndex replaces the cache's index with one entry.
func writeIndex(t *testing.T, c *Cache, im indexImage) {
	t.Helper()
	data, err := json.Marshal(indexFile{Version: indexVersion, Images: []indexImage{im}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.indexPath(), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A process out of descriptors (a flood of connections) says nothing about
// a blob: the response gets an error, the blob stays ready and is not sent
// back to be hashed. Every other failure to open a blob does send it back,
// so this guards that the shortage is told apart.
func TestOutOfDescriptorsKeepsBlob(t *testing.T) {
	data := testBytes(45, 64<<10)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	free, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0) // the lowest free number
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(free)
	low := old
	low.Cur = uint64(free) // every number below is taken: the next open fails
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	// Numbers another goroutine freed meanwhile (an idle connection of an
	// earlier test closing) are taken too, until none is left.
	var fill []int
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		fill = append(fill, fd)
	}
	_, ok, err := blobs{c}.Acquire(d)
	for _, fd := range fill {
		unix.Close(fd)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if ok || !errors.Is(err, unix.EMFILE) {
		t.Fatalf("Acquire out of descriptors: ok %v, err %v; want EMFILE", ok, err)
	}
	if info := c.Images()[0]; info.State != StateReady || info.Readers != 0 {
		t.Fatalf("after running out of descriptors the image is %v with %d readers, want ready with 0", info.State, info.Readers)
	}
}

// A file under another process's lease put in a blob's place cannot be
// opened (EWOULDBLOCK until the lease is let go): it is not the file
// verified, so the image is not served from it (before, it stayed ready
// and every response got 500), and while the verifier cannot read it the
// other blobs to verify are verified all the same (before, the verifier
// tried it again every second and nothing else).
func TestLeasedReplacement(t *testing.T) {
	a, b := testBytes(46, 64<<10), testBytes(47, 64<<10)
	da, db := digestOf(a), digestOf(b)
	c := readyCache(t, testConfig(t), a, b)
	corrupt(t, c.blobPath(db), 100)
	replaceBlob(t, c.blobPath(da))
	fd, err := unix.Open(c.blobPath(da), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	leased := true
	defer func() {
		if leased {
			unix.Close(fd)
		}
	}()
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		t.Skipf("no write lease here: %v", err)
	}
	// The kernel takes a lease away itself this long after an open asked
	// for it: the test needs it held for its 30 s of waiting.
	if b, err := os.ReadFile("/proc/sys/fs/lease-break-time"); err != nil {
		t.Skipf("no lease-break-time: %v", err)
	} else if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || n < 40 {
		t.Skipf("fs.lease-break-time is %q: a lease is broken before the test's waits end", b)
	}
	for _, d := range [][32]byte{db, da} { // a is the one used last: verified first
		if _, ok, err := (blobs{c}).Acquire(d); ok || err != nil {
			t.Fatalf("Acquire of a blob not the one verified: ok %v, err %v; want neither (verify it again)", ok, err)
		}
	}
	runCache(t, c)
	waitReady(t, c, db) // verified, found wrong, pulled again, while a cannot be read
	for _, in := range c.Images() {
		if in.SHA256 == da && in.State != StateVerifying {
			t.Fatalf("a while its file cannot be read: %v, want verifying", in.State)
		}
	}
	leased = false
	if err := unix.Close(fd); err != nil { // the lease goes with it
		t.Fatal(err)
	}
	waitReady(t, c, da) // now read, found wrong, and pulled again
	for _, x := range []struct {
		d    [32]byte
		data []byte
	}{{da, a}, {db, b}} {
		bl, ok, err := blobs{c}.Acquire(x.d)
		if !ok || err != nil {
			t.Fatalf("Acquire after the pull again: %v, %v", ok, err)
		}
		got := make([]byte, len(x.data))
		_, err = bl.File.ReadAt(got, 0)
		bl.Release()
		if err != nil || !bytes.Equal(got, x.data) {
			t.Fatalf("after the pull again: %v, or not the image's bytes", err)
		}
	}
}

// A blob being verified again that is evicted while a response still
// reads it, and then wanted again before that response ends, goes back to
// being verified, not to ready: it was never checked (before, it was
// reported ready, unverified, until a response found its file changed).
func TestWantedAgainWhileVerifying(t *testing.T) {
	data := testBytes(48, 64<<10)
	d := digestOf(data)
	c := readyCache(t, testConfig(t), data)
	b := blobs{c}
	held, ok, err := b.Acquire(d) // a response reading it throughout
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	defer held.Release()
	corrupt(t, c.blobPath(d), 100)
	if _, ok, err := b.Acquire(d); ok || err != nil {
		t.Fatalf("Acquire of a changed blob: %v, %v; want neither (verify it again)", ok, err)
	}
	if err := c.Remove(d); err != nil {
		t.Fatal(err)
	}
	if st := c.Images()[0].State; st != StateEvicting {
		t.Fatalf("after Remove with a reader: %v, want evicting", st)
	}
	if err := c.Add(Want{URL: "http://o/img", SHA256: d, Format: "iso"}); err != nil {
		t.Fatal(err)
	}
	if st := c.Images()[0].State; st != StateVerifying {
		t.Fatalf("wanted again before its reader ended: %v, want verifying (it was never verified)", st)
	}
}

// A resumed pull whose old ingest file is a hard link to another file,
// with a checkpoint that hashed the image's own first bytes (anyone can
// compute it), does not serve that file's bytes as the image: the resume
// hashes what it continues, finds it is not what the checkpoint hashed,
// and the pull starts over. Before, the checkpoint's hash state was
// trusted, the final digest matched, and the other file's first bytes
// were served as the image.
func TestResumeOverALinkedFile(t *testing.T) {
	data := testBytes(49, 256<<10)
	d := digestOf(data)
	cfg := testConfig(t)
	c := openCache(t, cfg)
	secret := filepath.Join(cfg.Dir, "secret") // on the cache's file system, for the link
	own := bytes.Repeat([]byte("S3CRET!"), len(data)/7+1)[:len(data)]
	if err := os.WriteFile(secret, own, 0o600); err != nil {
		t.Fatal(err)
	}
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) { serveBytes(w, r, data, `"v1"`) })
	if err := c.Add(Want{URL: o.url("img"), SHA256: d, Format: "iso"}); err != nil {
		t.Fatal(err)
	}
	const off = 128 << 10
	h := sha256.New()
	h.Write(data[:off])
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	ck, err := json.Marshal(map[string]any{"v": 1, "sha256": hexOf(d), "url": o.url("img"), "offset": off,
		"total": len(data), "etag": `"v1"`, "hash_state": state})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.ckptPath(d), ck, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, c.partPath(d)); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	waitReady(t, c, d)
	if blob, err := os.ReadFile(c.blobPath(d)); err != nil || !bytes.Equal(blob, data) {
		t.Fatalf("the blob is not the image (%v): its first bytes %q", err, blob[:min(16, len(blob))])
	}
	if b, err := os.ReadFile(secret); err != nil || !bytes.Equal(b, own) {
		t.Errorf("the linked file changed (%v)", err)
	}
	// It started over (the copy hashed bytes the checkpoint did not; the
	// test's cache keeps 1 byte free, so it was not for want of space).
	if reqs := o.requests(); len(reqs) != 1 || reqs[0].Range != "" {
		t.Errorf("origin requests %+v, want one, from byte 0", reqs)
	}
}

// Only the cache's user can put files in its directories: a directory
// writable by group or others is made private at Open, one that is a
// link or belongs to another user is refused with a line that names it.
// The cache's own directory may be a link (to another disk).
func TestCacheDirectoriesOwned(t *testing.T) {
	open := func(t *testing.T, cfg Config) (*Cache, error) {
		t.Helper()
		c, err := Open(cfg)
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
	t.Run("writable by others", func(t *testing.T) {
		cfg := testConfig(t)
		ingest := filepath.Join(cfg.Dir, "ingest")
		if err := os.MkdirAll(ingest, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(ingest, 0o777); err != nil {
			t.Fatal(err)
		}
		if _, err := open(t, cfg); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(ingest); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("ingest after Open: %v (%v), want 0755", fi.Mode(), err)
		}
	})
	for _, name := range []string{"ingest", "blobs"} {
		t.Run("a link inside: "+name, func(t *testing.T) {
			cfg := testConfig(t)
			elsewhere := t.TempDir()
			if err := os.Symlink(elsewhere, filepath.Join(cfg.Dir, name)); err != nil {
				t.Fatal(err)
			}
			if _, err := open(t, cfg); err == nil || !strings.Contains(err.Error(), name+" is not a directory") {
				t.Errorf("Open with %s a link: %v, want a refusal naming it", name, err)
			}
			if got := dirNames(t, elsewhere); len(got) != 0 {
				t.Errorf("Open made %s where the link points", got)
			}
		})
	}
	t.Run("the cache's own directory a link", func(t *testing.T) {
		cfg := testConfig(t)
		real := t.TempDir()
		cfg.Dir = filepath.Join(cfg.Dir, "cache")
		if err := os.Symlink(real, cfg.Dir); err != nil {
			t.Fatal(err)
		}
		if _, err := open(t, cfg); err != nil {
			t.Fatalf("Open through a link to the cache's directory: %v", err)
		}
		if !fileExists(filepath.Join(real, "lock")) {
			t.Error("the cache is not in the directory the link names")
		}
	})
	t.Run("another user's, and this process cannot write it", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("running Open as another user needs root")
		}
		cfg := testConfig(t)
		if err := os.Chmod(filepath.Dir(cfg.Dir), 0o755); err != nil { // t.TempDir's parent is 0700
			t.Fatal(err)
		}
		// An earlier run as root made the cache's directory; now the
		// service runs as another user (uid 65534 here: a child process).
		for d := filepath.Dir(filepath.Dir(cfg.Dir)); ; d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
				t.Skipf("another user cannot reach the test's directory (%s: %v)", d, fi.Mode())
			}
			if d == "/" {
				break
			}
		}
		// The test binary, where that user can run it.
		bin := filepath.Join(filepath.Dir(cfg.Dir), "imagecache.test")
		exe, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, exe, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-test.run=^TestOpenAsChild$")
		cmd.Env = append(os.Environ(), "IMAGECACHE_TEST_OPEN_DIR="+cfg.Dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if len(out) == 0 {
			t.Fatalf("the child process: %v", err)
		}
		if !strings.Contains(string(out), "belongs to uid 0, not to uid 65534") || !strings.Contains(string(out), "chown -R 65534 "+cfg.Dir+"/") {
			t.Errorf("Open as uid 65534 of a directory root made:\n%s\nwant a refusal naming the owner and the chown", out)
		}
	})
	t.Run("another user's", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("chown to another user needs root")
		}
		cfg := testConfig(t)
		blobs := filepath.Join(cfg.Dir, "blobs")
		if err := os.MkdirAll(blobs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(blobs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := open(t, cfg); err == nil || !strings.Contains(err.Error(), "blobs belongs to uid 65534") {
			t.Errorf("Open with blobs another user's: %v, want a refusal naming it", err)
		}
	})
}

// TestOpenAsChild is TestCacheDirectoriesOwned's child process: it opens
// the cache in IMAGECACHE_TEST_OPEN_DIR and prints Open's error.
func TestOpenAsChild(t *testing.T) {
	dir := os.Getenv("IMAGECACHE_TEST_OPEN_DIR")
	if dir == "" {
		t.Skip("only as TestCacheDirectoriesOwned's child process")
	}
	c, err := Open(Config{Dir: dir, Logger: slog.New(slog.DiscardHandler), MinFree: 1})
	if err == nil {
		c.Close()
		t.Fatal("Open succeeded")
	}
	fmt.Println(err)
}
