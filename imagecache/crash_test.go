package imagecache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Environment of the helper process.
const (
	helperDir  = "IMAGECACHE_HELPER_DIR"
	helperURL  = "IMAGECACHE_HELPER_URL"
	helperHash = "IMAGECACHE_HELPER_SHA256"
	helperAddr = "IMAGECACHE_HELPER_ADDR_FILE"
)

// TestHelperProcess is the child of TestCrashDuringPull: it opens the cache
// on a directory, wants one image, serves /cache on a loopback listener
// whose address it writes to a file, and pulls until its stdin closes (or
// it is killed, which is the point).
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDir)
	if dir == "" {
		t.Skip("helper process of TestCrashDuringPull; runs only as its child")
	}
	if err := helperMain(dir); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

func helperMain(dir string) error {
	d, err := ParseDigest(os.Getenv(helperHash))
	if err != nil {
		return err
	}
	c, err := Open(Config{
		Dir: dir, CheckpointBytes: 256 << 10, Concurrency: 1,
		Backoff: func(int) time.Duration { return 20 * time.Millisecond },
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetWanted([]Want{{URL: os.Getenv(helperURL), SHA256: d}}); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	addrFile := os.Getenv(helperAddr)
	if err := os.WriteFile(addrFile+".tmp", []byte(ln.Addr().String()), 0o600); err != nil {
		return err
	}
	if err := os.Rename(addrFile+".tmp", addrFile); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	return c.Run(ctx)
}

// throttled serves bytes slowly, so that kills land in the middle of pulls,
// and counts what the current request has sent.
type throttled struct {
	*bytes.Reader
	sent *atomic.Int64
}

func (r throttled) Read(p []byte) (int, error) {
	time.Sleep(3 * time.Millisecond)
	n, err := r.Reader.Read(p[:min(len(p), 32<<10)])
	r.sent.Add(int64(n))
	return n, err
}

// sentCounters counts the bytes the origin sent, per request.
type sentCounters struct {
	mu sync.Mutex
	by []*atomic.Int64
}

func (s *sentCounters) counter(n int) *atomic.Int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.by) <= n {
		s.by = append(s.by, new(atomic.Int64))
	}
	return s.by[n]
}

func (s *sentCounters) get(n int) int64 { return s.counter(n).Load() }

func (s *sentCounters) total() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t int64
	for _, c := range s.by {
		t += c.Load()
	}
	return t
}

// child is one run of the helper process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
	log   *bytes.Buffer
}

func startChild(t *testing.T, dir, url string, d [32]byte, round int) *child {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperDir+"="+dir, helperURL+"="+url,
		helperHash+"="+hex.EncodeToString(d[:]), helperAddr+"="+addrFile)
	ch := &child{cmd: cmd, log: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = ch.log, ch.log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch.stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(addrFile); err == nil {
			ch.addr = string(b)
			return ch
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: the child did not start:\n%s", round, ch.log)
		}
	}
}

// probeStats counts what the probes saw.
type probeStats struct {
	mu               sync.Mutex
	codes            map[int]int
	errors           int
	checkedBodyBytes int64
	wrong            []string
}

// probe reads /cache/<hex> from addr with random ranges and HEADs until
// stop closes; every 200 and 206 body must be the true bytes.
func probe(addr string, data []byte, d [32]byte, rng *rand.Rand, st *probeStats, stop <-chan struct{}) {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	url := "http://" + addr + URLPath(d)
	for {
		select {
		case <-stop:
			return
		default:
		}
		method, hdr := "GET", ""
		switch rng.IntN(4) {
		case 0:
			method = "HEAD"
		case 1:
			s := rng.IntN(len(data))
			hdr = fmt.Sprintf("bytes=%d-%d", s, s+rng.IntN(4096))
		case 2:
			hdr = fmt.Sprintf("bytes=-%d", 1+rng.IntN(2048))
		}
		st.check(client, method, url, hdr, data)
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
}

func (st *probeStats) check(client *http.Client, method, url, rangeHdr string, data []byte) {
	req, _ := http.NewRequest(method, url, nil)
	if rangeHdr != "" {
		req.Header.Set("Range", rangeHdr)
	}
	resp, err := client.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.errors++ // the child was killed under it
		return
	}
	st.codes[resp.StatusCode]++
	want, ok := expectedBody(method, resp, data)
	if !ok || (resp.StatusCode == 200 || resp.StatusCode == 206) && !bytes.Equal(body, want) {
		st.wrong = append(st.wrong, fmt.Sprintf("%s Range %q: %d %q, %d bytes", method, rangeHdr,
			resp.StatusCode, resp.Header.Get("Content-Range"), len(body)))
	}
	st.checkedBodyBytes += int64(len(body))
}

// expectedBody is what a 200 or 206 must carry; ok is false when the
// headers themselves are wrong.
func expectedBody(method string, resp *http.Response, data []byte) ([]byte, bool) {
	switch resp.StatusCode {
	case 200:
		if resp.ContentLength != int64(len(data)) {
			return nil, false
		}
		if method == "HEAD" {
			return []byte{}, true
		}
		return data, true
	case 206:
		var first, last, size int64
		_, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-%d/%d", &first, &last, &size)
		if err != nil || first < 0 || last < first || size != int64(len(data)) || resp.ContentLength != last-first+1 {
			return nil, false
		}
		return data[first : last+1], true
	}
	return nil, true
}

// TestCrashDuringPull kills a real child process with SIGKILL at seeded
// random points of a pull several times, probing its /cache all along, then
// lets a last child finish: the image must end ready with the right digest,
// the pull must have resumed rather than restarted, and no probe may ever
// have seen a wrong byte.
func TestCrashDuringPull(t *testing.T) {
	const size, kills, seed = 6 << 20, 4, 20260301
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	data := testBytes(seed, size)
	d := digestOf(data)
	var sent sentCounters
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", time.Time{}, throttled{bytes.NewReader(data), sent.counter(n)})
	})
	dir := t.TempDir()
	st := &probeStats{codes: map[int]int{}}
	for round := range kills {
		target := int64(64<<10 + rng.IntN(1536<<10))
		pause := time.Duration(rng.IntN(20)) * time.Millisecond
		crashRound(t, o, &sent, dir, data, round, target, pause, st)
	}

	ch := startChild(t, dir, o.url("img.iso"), d, kills)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { probe(ch.addr, data, d, rand.New(rand.NewPCG(seed, kills)), st, stop) })
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	ready := false
	for deadline := time.Now().Add(90 * time.Second); !ready && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		code, _, body := get(t, client, "GET", "http://"+ch.addr+URLPath(d), nil)
		ready = code == 200 && bytes.Equal(body, data)
	}
	time.Sleep(300 * time.Millisecond) // probes read the ready image too
	close(stop)
	wg.Wait()
	ch.stdin.Close()
	waitExit(t, ch)
	if !ready {
		t.Fatalf("the image never became ready; last child:\n%s", ch.log)
	}

	blob, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hexOf(d)))
	if err != nil || sha256.Sum256(blob) != d {
		t.Errorf("blob digest wrong or missing (err %v)", err)
	}
	if names := dirNames(t, filepath.Join(dir, "ingest")); len(names) != 0 {
		t.Errorf("ingest holds %v after the commit", names)
	}
	resumed := 0
	for _, r := range o.requests() {
		if r.Range != "" && r.Range != "bytes=0-" && strings.HasPrefix(r.Range, "bytes=") {
			resumed++
		}
	}
	t.Logf("origin: %d requests, %d resumed, %d bytes sent for a %d-byte image; probes: %v, %d errors, %d body bytes checked",
		len(o.requests()), resumed, sent.total(), size, st.codes, st.errors, st.checkedBodyBytes)
	if resumed == 0 {
		t.Errorf("no request resumed with Range: every restart began from zero")
	}
	if sent.total() >= 2*size {
		t.Errorf("origin sent %d bytes for a %d-byte image: restarts are not resuming", sent.total(), size)
	}
	if st.codes[503] == 0 {
		t.Errorf("no probe saw 503 during the pull: the probes did not run while pulling")
	}
	if len(st.wrong) > 0 {
		t.Errorf("probes got wrong answers:\n%s", strings.Join(st.wrong, "\n"))
	}
}

// crashRound starts a child, probes it, and SIGKILLs it once its request
// to the origin has received target bytes (and pause more).
func crashRound(t *testing.T, o *origin, sent *sentCounters, dir string, data []byte, round int,
	target int64, pause time.Duration, st *probeStats) {
	t.Helper()
	const seed = 20260301
	d := digestOf(data)
	first := len(o.requests())
	ch := startChild(t, dir, o.url("img.iso"), d, round)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { probe(ch.addr, data, d, rand.New(rand.NewPCG(seed, uint64(round))), st, stop) })
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if n := len(o.requests()); n > first && sent.get(n-1) >= target {
			break
		}
	}
	time.Sleep(pause)
	ch.cmd.Process.Kill() // SIGKILL
	ch.cmd.Wait()
	close(stop)
	wg.Wait()
	t.Logf("round %d: killed after its request received about %d bytes", round, sent.get(len(o.requests())-1))
}

func waitExit(t *testing.T, ch *child) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- ch.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("last child exited with %v:\n%s", err, ch.log)
		}
	case <-time.After(20 * time.Second):
		ch.cmd.Process.Kill()
		<-done
		t.Errorf("last child did not stop when its stdin closed:\n%s", ch.log)
	}
}
