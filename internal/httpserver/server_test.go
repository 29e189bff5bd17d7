package httpserver

import (
	"bufio"
	"context"
	"errors"
	"github.com/siteboot/siteboot/internal/metrictest"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs a Server for cfg with h on loopback until the test ends.
func serve(t *testing.T, cfg Config, h http.Handler) (*Server, string) {
	t.Helper()
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, s.Listener(ln), h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

// SlowDial connects to addr with a small receive buffer, so that a client
// that stops reading stalls the server after little data.
func slowDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func get(conn net.Conn, path string) error {
	_, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	return err
}

// bigFile is size bytes on disk.
func bigFile(t *testing.T, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "big")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return p
}

// fileHandler serves the file at path with io.CopyN (sendfile) and reports
// how each response ended.
func fileHandler(t *testing.T, path string, ended chan<- error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		fi, _ := f.Stat()
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
		w.WriteHeader(200)
		var n int64
		if r.URL.Path == "/write" { // through Write, not sendfile
			n, err = io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{f}, make([]byte, 1<<20))
		} else {
			n, err = io.CopyN(w, f, fi.Size())
		}
		if n == fi.Size() {
			err = nil
		}
		ended <- err
	})
}

// A response whose client stops reading ends ProgressTimeout after the
// socket stopped taking bytes, through sendfile and through Write alike.
func TestProgressTimeoutAbortsStalledResponses(t *testing.T) {
	const timeout = 500 * time.Millisecond
	ended := make(chan error, 4)
	reg := prometheus.NewRegistry()
	s, addr := serve(t, Config{ProgressTimeout: timeout, Metrics: reg}, fileHandler(t, bigFile(t, 256<<20), ended))
	for _, path := range []string{"/sendfile", "/write"} {
		t.Run(path, func(t *testing.T) {
			conn := slowDial(t, addr)
			start := time.Now()
			if err := get(conn, path); err != nil {
				t.Fatal(err)
			}
			// Read nothing: the buffers fill, then nothing moves.
			select {
			case err := <-ended:
				took := time.Since(start)
				if !errors.Is(err, os.ErrDeadlineExceeded) || took < timeout || took > timeout+3*time.Second {
					t.Errorf("response ended after %v with %v; want the progress deadline after about %v", took, err, timeout)
				}
			case <-time.After(timeout + 10*time.Second):
				t.Fatal("the stalled response never ended")
			}
		})
	}
	if got := metrictest.Counter(t, s.stalled); got != 2 {
		t.Errorf("stalled_responses_total = %v, want 2", got)
	}
}

// A client that reads slowly but steadily gets the whole body, however
// much longer than ProgressTimeout the transfer takes.
func TestProgressTimeoutSparesSlowClients(t *testing.T) {
	const timeout = 300 * time.Millisecond
	const size = 256 << 10
	ended := make(chan error, 1)
	_, addr := serve(t, Config{ProgressTimeout: timeout}, fileHandler(t, bigFile(t, size), ended))
	conn := slowDial(t, addr)
	if err := get(conn, "/sendfile"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(conn, 16<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	start, buf, got := time.Now(), make([]byte, 16<<10), 0
	for {
		n, err := resp.Body.Read(buf)
		got += n
		if err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // well under 1 MB/s, well above nothing
	}
	if got != size || <-ended != nil {
		t.Errorf("slow client got %d of %d bytes in %v", got, size, time.Since(start))
	}
	if took := time.Since(start); took < 2*timeout {
		t.Errorf("the transfer took %v: too fast to show that a slow client outlives the %v timeout", took, timeout)
	}
}

// Connections over MaxConnections are answered 503 and closed at once;
// when one closes, a new one is served.
func TestMaxConnections(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	s, addr := serve(t, Config{MaxConnections: 3}, ok)
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	waitFor(t, func() bool { return s.open.Load() == 3 })
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	reply, _ := io.ReadAll(extra)
	if took := time.Since(start); !strings.HasPrefix(string(reply), "HTTP/1.1 503 ") || took > time.Second {
		t.Errorf("connection over the cap: %q after %v; want a 503 and a close at once", reply, took)
	}
	if got := metrictest.Counter(t, s.refused); got != 1 {
		t.Errorf("connections_refused_total = %v, want 1", got)
	}
	held[0].Close()
	waitFor(t, func() bool { return s.open.Load() == 2 })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	get(c, "/")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a slot freed: %v, %v", resp, err)
	}
	resp.Body.Close()
}

// One client address holds at most MaxPerSource connections: one more
// from it is answered 503 and closed at once, while another address is
// still served; when one of its connections closes, it gets a place again.
func TestMaxPerSource(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	s, addr := serve(t, Config{MaxConnections: 10, MaxPerSource: 2}, ok)
	dialFrom := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		return c
	}
	served := func(c net.Conn) bool {
		t.Helper()
		get(c, "/")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	a := []net.Conn{dialFrom("127.0.0.1"), dialFrom("127.0.0.1")}
	waitFor(t, func() bool { return s.open.Load() == 2 })
	extra := dialFrom("127.0.0.1")
	reply, _ := io.ReadAll(extra)
	if !strings.HasPrefix(string(reply), "HTTP/1.1 503 ") {
		t.Errorf("a third connection from one address: %q; want a 503", reply)
	}
	if got := metrictest.Counter(t, s.refusedFrom); got != 1 {
		t.Errorf("connections_refused_per_source_total = %v, want 1", got)
	}
	if got := metrictest.Counter(t, s.refused); got != 1 {
		t.Errorf("connections_refused_total = %v, want 1", got)
	}
	if !served(dialFrom("127.0.0.2")) {
		t.Error("another address was not served while the first held its places")
	}
	a[0].Close()
	waitFor(t, func() bool {
		s.srcMu.Lock()
		defer s.srcMu.Unlock()
		return s.bySource[netip.MustParseAddr("127.0.0.1")] == 1
	})
	if !served(dialFrom("127.0.0.1")) {
		t.Error("the address was not served after one of its connections closed")
	}
	for _, c := range a[1:] {
		c.Close()
	}
	waitFor(t, func() bool { return s.open.Load() == 2 }) // the two served ones, still open
}

// MaxPerSource defaults to an eighth of MaxConnections, at least 64.
func TestDefaultMaxPerSource(t *testing.T) {
	for _, tc := range []struct{ max, want int }{{4096, 512}, {100, 64}, {64, 64}} {
		s, err := New(Config{MaxConnections: tc.max})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.MaxPerSource(); got != tc.want {
			t.Errorf("MaxConnections %d: MaxPerSource %d, want %d", tc.max, got, tc.want)
		}
	}
	if _, err := New(Config{MaxPerSource: -1}); err == nil {
		t.Error("a negative MaxPerSource was accepted")
	}
}

// A request head past 64 KiB is refused with 431 before any handler runs:
// a Range of 200,000 one-byte parts (800 KB) never reaches one.
func TestRequestHeadBound(t *testing.T) {
	reached := false
	var mu sync.Mutex
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { mu.Lock(); reached = true; mu.Unlock() })
	_, addr := serve(t, Config{}, h)
	req, _ := http.NewRequest("GET", "http://"+addr+"/boot/ipxe.efi", nil)
	req.Header.Set("Range", "bytes="+strings.Repeat("0-0,", 200_000))
	client := &http.Client{}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || reached {
		t.Errorf("status %d, handler reached %t; want 431 and no handler", resp.StatusCode, reached)
	}
}

func TestDefaultMaxConnections(t *testing.T) {
	for _, tc := range []struct {
		limit int64
		want  int
	}{{0, 4096}, {1 << 20, 4096}, {20000, 4096}, {8192, 3584}, {1024, 64}} {
		if got := defaultMaxConnections(tc.limit); got != tc.want {
			t.Errorf("defaultMaxConnections(%d) = %d, want %d", tc.limit, got, tc.want)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// MaxPerSource counts an IPv4 address, mapped or not, as itself, and an
// IPv6 address by its /64: a host picks addresses in its SLAAC /64 at
// will.
func TestSourceKey(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"fd00:1:2:3:aaaa::1", "fd00:1:2:3::"},
		{"fd00:1:2:3:bbbb:cccc:dddd:eeee", "fd00:1:2:3::"},
		{"fe80::1%eth0", "fe80::"},
	} {
		if got := sourceKey(netip.MustParseAddr(c.a)); got != netip.MustParseAddr(c.b) {
			t.Errorf("sourceKey(%s) = %s, want %s", c.a, got, c.b)
		}
	}
	if sourceKey(netip.MustParseAddr("fd00:1:2:3::1")) == sourceKey(netip.MustParseAddr("fd00:1:2:4::1")) {
		t.Error("two /64s counted as one")
	}
}
