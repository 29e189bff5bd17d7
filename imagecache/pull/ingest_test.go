package pull

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// createPart writes only to a file it created: a symbolic link, a hard
// link or a FIFO put at the ingest path is removed, not written through
// (nor waited on), and the file a link names keeps its bytes.
func TestCreatePartOverPlantedFiles(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("not the cache's"), 0o644); err != nil {
		t.Fatal(err)
	}
	var vst unix.Stat_t
	if err := unix.Stat(victim, &vst); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		plant func(path string) error
	}{
		{"symbolic link", func(p string) error { return os.Symlink(victim, p) }},
		{"hard link", func(p string) error { return os.Link(victim, p) }},
		{"fifo", func(p string) error { return unix.Mkfifo(p, 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".part")
			if err := tc.plant(path); err != nil {
				t.Fatal(err)
			}
			type result struct {
				f   *os.File
				err error
			}
			done := make(chan result, 1)
			go func() {
				f, err := createPart(path)
				done <- result{f, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				// A FIFO opened for writing waits for a reader: give it one.
				if fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
					defer unix.Close(fd)
				}
				t.Fatalf("createPart over a %s still waiting after 10 s", tc.name)
			}
			if r.err != nil {
				t.Fatalf("createPart over a %s: %v", tc.name, r.err)
			}
			defer r.f.Close()
			if _, err := r.f.WriteString("image bytes"); err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Fstat(int(r.f.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			if st.Ino == vst.Ino || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
				t.Errorf("createPart over a %s opened inode %d (the linked file's is %d), mode %o, %d names", tc.name, st.Ino, vst.Ino, st.Mode, st.Nlink)
			}
		})
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "not the cache's" {
		t.Errorf("the linked file now holds %q (%v)", b, err)
	}
}

// A hard link put at the ingest path and taken away again, over and over,
// while the pull creates its file: createPart either fails (something came
// back at the path) or creates a file of its own, never the linked one. A
// check of an opened file (its count of names, then the path again) was
// beaten by this loop in about 0.5 % of tries.
func TestCreatePartHardLinkRace(t *testing.T) {
	dir := t.TempDir()
	victim, part := filepath.Join(dir, "victim"), filepath.Join(dir, "x.part")
	if err := os.WriteFile(victim, []byte("not the cache's"), 0o644); err != nil {
		t.Fatal(err)
	}
	var vst unix.Stat_t
	if err := unix.Stat(victim, &vst); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if os.Link(victim, part) == nil {
				os.Remove(part)
			}
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	const tries = 5000
	var created, got int
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < tries && time.Now().Before(deadline); i++ {
		f, err := createPart(part)
		if err != nil {
			continue
		}
		created++
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		if st.Ino == vst.Ino && st.Dev == vst.Dev {
			got++
		}
		f.Close()
		os.Remove(part) // its own file: let the links go on
	}
	t.Logf("%d of %d creations succeeded", created, tries)
	if got != 0 {
		t.Fatalf("createPart handed out the linked file %d times in %d tries", got, tries)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "not the cache's" {
		t.Errorf("the linked file now holds %q (%v)", b, err)
	}
}

// A resumed pull continues in a file of its own holding the checkpointed
// bytes: with a hard link to another file at the ingest path, that file is
// only read, never written or truncated.
func TestContinuePartLeavesALinkedFile(t *testing.T) {
	dir := t.TempDir()
	victim, part := filepath.Join(dir, "victim"), filepath.Join(dir, "x.part")
	secret := []byte("0123456789 the linked file's own bytes, longer than the offset")
	if err := os.WriteFile(victim, secret, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(victim, part); err != nil {
		t.Fatal(err)
	}
	j := &job{req: Request{Part: part, ResumeReserve: 1}}
	f, _, err := j.continuePart(context.Background(), 10, hashState(t, secret[:10]))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("the pull's next bytes"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(victim); err != nil || !bytes.Equal(b, secret) {
		t.Errorf("the linked file now holds %q (%v)", b, err)
	}
	b, err := os.ReadFile(part)
	if err != nil || string(b) != "0123456789the pull's next bytes" {
		t.Errorf("the ingest file holds %q (%v), want the checkpointed 10 bytes and what came after", b, err)
	}
	if fileNames(t, dir) != "victim x.part" {
		t.Errorf("files left: %s", fileNames(t, dir))
	}
}

// hashState is the SHA-256 state after b, as a checkpoint holds it.
func hashState(t *testing.T, b []byte) []byte {
	t.Helper()
	h := sha256.New()
	h.Write(b)
	st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A resume hashes the bytes it continues: ones that are not those the
// checkpoint hashed (a crash that lost them, a file put in the old one's
// place) make it fail, before anything is written after them, and the old
// file and nothing else is left. A cancelled copy stops and leaves the old
// file for the next attempt.
func TestContinuePartChecksAndStops(t *testing.T) {
	dir := t.TempDir()
	part := filepath.Join(dir, "x.part")
	data := bytes.Repeat([]byte("siteboot"), 1<<18) // 2 MiB: the copy takes two chunks
	if err := os.WriteFile(part, data, 0o600); err != nil {
		t.Fatal(err)
	}
	j := &job{req: Request{Part: part, ResumeReserve: 1}}
	other := append([]byte("X"), data[1:3<<19]...)
	if _, _, err := j.continuePart(context.Background(), 3<<19, hashState(t, other)); err == nil || !strings.Contains(err.Error(), "not those the checkpoint hashed") {
		t.Errorf("continuePart with bytes the checkpoint did not hash: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := j.continuePart(ctx, 3<<19, hashState(t, data[:3<<19])); !errors.Is(err, context.Canceled) {
		t.Errorf("continuePart with its context ended: %v, want context.Canceled", err)
	}
	if b, err := os.ReadFile(part); err != nil || !bytes.Equal(b, data) {
		t.Errorf("the old ingest file changed (%v)", err)
	}
	if fileNames(t, dir) != "x.part" {
		t.Errorf("files left: %s", fileNames(t, dir))
	}
	f, h, err := j.continuePart(context.Background(), 3<<19, hashState(t, data[:3<<19]))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h.Write(data[3<<19:])
	if [32]byte(h.Sum(nil)) != sha256.Sum256(data) {
		t.Error("the hash a resume returns does not continue to the data's digest")
	}
}

func fileNames(t *testing.T, dir string) string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return strings.Join(names, " ")
}

// A FIFO at the checkpoint's path does not hold the pull (it would wait
// for a writer, past cancellation), and neither a link nor an oversized
// file is read: the checkpoint is not usable, and the pull starts over.
func TestReadCheckpointRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		plant func(path string) error
	}{
		{"fifo", func(p string) error { return unix.Mkfifo(p, 0o600) }},
		{"link to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }},
		{"sparse file", func(p string) error {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				return err
			}
			return os.Truncate(p, 1<<30)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, "/", "-")+".ckpt")
			if err := tc.plant(path); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := readCheckpoint(path)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("readCheckpoint of a %s: no error", tc.name)
				}
			case <-time.After(10 * time.Second):
				if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
					unix.Close(fd) // let a reader waiting on the FIFO go
				}
				t.Fatalf("readCheckpoint of a %s still reading after 10 s", tc.name)
			}
		})
	}
}

// A resume whose copy would not leave the request's reserve free refuses
// (the pull starts over, deleting the old data, instead of filling the
// disk the cache and its other pulls write to), and leaves nothing.
func TestContinuePartKeepsTheReserve(t *testing.T) {
	dir := t.TempDir()
	part := filepath.Join(dir, "x.part")
	data := bytes.Repeat([]byte("siteboot"), 1<<10)
	if err := os.WriteFile(part, data, 0o600); err != nil {
		t.Fatal(err)
	}
	j := &job{req: Request{Part: part, ResumeReserve: 1 << 62}}
	if _, _, err := j.continuePart(context.Background(), 4096, hashState(t, data[:4096])); err == nil || !strings.Contains(err.Error(), "too few to copy") {
		t.Errorf("continuePart without room for its copy: %v", err)
	}
	if fileNames(t, dir) != "x.part" {
		t.Errorf("files left: %s", fileNames(t, dir))
	}
}

// A checkpoint whose offset or size is not the image's (as the catalog
// gives it) is not resumed from: nothing is copied for it.
func TestResumeChecksTheImageSize(t *testing.T) {
	dir := t.TempDir()
	data := testData()
	d := sha256.Sum256(data)
	part, ckpt := filepath.Join(dir, "x.part"), filepath.Join(dir, "x.ckpt")
	if err := os.WriteFile(part, data[:300], 0o600); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(validCheckpoint(t, data, 300))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ckpt, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{200, int64(len(data)) + 1} {
		j := &job{req: Request{URL: "http://o/x", SHA256: d, Size: size, Part: part, Checkpoint: ckpt, Progress: &Progress{}, ResumeReserve: 1}}
		if err := j.resume(context.Background()); err == nil || !strings.Contains(err.Error(), "not the image's size") {
			t.Errorf("resume of a checkpoint for %d bytes into an image of %d: %v", len(data), size, err)
		}
	}
	j := &job{req: Request{URL: "http://o/x", SHA256: d, Size: int64(len(data)), Part: part, Checkpoint: ckpt, Progress: &Progress{}, ResumeReserve: 1}}
	if err := j.resume(context.Background()); err != nil {
		t.Fatalf("resume of a checkpoint of the image's size: %v", err)
	}
	defer j.part.Close()
	if j.off != 300 || fileNames(t, dir) != "x.ckpt x.part" {
		t.Errorf("after the resume: offset %d, files %s", j.off, fileNames(t, dir))
	}
}

// A checkpoint of the whole image (a stop between the last write and the
// seal) completes the pull without a request: before, the range from the
// image's end got 416 and the image was downloaded again. Bytes that do
// not give the digest still start the pull over from the origin, and the
// cache still has its say on the image's size (its capacity may have
// been lowered since the checkpoint).
func TestResumeAtTheEnd(t *testing.T) {
	data := testData()
	for _, tt := range []struct {
		name     string
		image    []byte // what the origin serves and the digest is of
		space    Space
		requests int
		err      string
	}{
		{"the image", data, roomy{}, 0, ""},
		{"another image", append([]byte("X"), data[1:]...), roomy{}, 1, ""},
		{"no room for it", data, tooSmall{}, 0, "larger than the cache"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var ranges []string
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				ranges = append(ranges, r.Header.Get("Range"))
				mu.Unlock()
				w.Header().Set("ETag", `"v1"`)
				http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(tt.image))
			}))
			defer origin.Close()
			dir := t.TempDir()
			part, ckpt := filepath.Join(dir, "x.part"), filepath.Join(dir, "x.ckpt")
			if err := os.WriteFile(part, data, 0o600); err != nil {
				t.Fatal(err)
			}
			d := sha256.Sum256(tt.image)
			ck := validCheckpoint(t, data, len(data))
			ck.URL, ck.SHA256 = origin.URL+"/x", hex.EncodeToString(d[:])
			raw, err := json.Marshal(ck)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(ckpt, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			p := New(Config{Client: origin.Client(), Retries: 1, Backoff: func(int) time.Duration { return 0 },
				Sleep: func(context.Context, time.Duration) error { return nil }, StallTimeout: 10 * time.Second,
				CheckpointBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler),
				Bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "bytes"})})
			req := Request{URL: ck.URL, SHA256: d, Part: part, Checkpoint: ckpt,
				Progress: &Progress{}, Space: tt.space, ResumeReserve: 1}
			_, err = p.Pull(context.Background(), req)
			switch {
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("Pull: %v, want an error containing %q", err, tt.err)
			case tt.err != "":
				return
			case err != nil:
				t.Fatalf("Pull: %v", err)
			}
			got, err := os.ReadFile(part)
			if err != nil || !bytes.Equal(got, tt.image) {
				t.Errorf("the ingest file is not the image (%v)", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(ranges) != tt.requests || tt.requests > 0 && ranges[0] != "" {
				t.Errorf("origin asked for ranges %q, want %d request(s) of the whole image", ranges, tt.requests)
			}
		})
	}
}

// roomy is a cache with room for anything.
type roomy struct{}

func (roomy) Admit(total, off int64) error { return nil }
func (roomy) Check(size int64) error       { return nil }

// tooSmall is a cache with room for nothing.
type tooSmall struct{}

func (tooSmall) Admit(total, off int64) error { return errors.New("image is larger than the cache") }
func (tooSmall) Check(size int64) error       { return errors.New("image is larger than the cache") }
