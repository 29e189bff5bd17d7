package imagecache

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/internal/httpserver"
	"golang.org/x/sys/unix"
)

// stalledTimeout is the progress deadline TestStalledReadersDoNotHoldEviction
// serves with.
const stalledTimeout = time.Second

// Twenty clients that ask for a large image and stop reading hold it
// EVICTING only until the HTTP server's progress deadline cuts their
// responses off: then image rm completes, the blob leaves the disk, and
// its space counts as free again. Through the fast path and through
// net/http alone (cache.fast_path false) alike.
func TestStalledReadersDoNotHoldEviction(t *testing.T) {
	data := testBytes(13, 32<<20)
	d := digestOf(data)
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast path %t", fast), func(t *testing.T) {
			c := readyCache(t, testConfig(t), data)
			addr := serveLimited(t, c, fast)
			for range 20 {
				conn := smallWindowDial(t, addr)
				if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", URLPath(d)); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, func() bool { return c.Images()[0].Readers == 20 })
			if err := c.Remove(d); err != nil {
				t.Fatal(err)
			}
			if st := c.Images()[0].State; st != StateEvicting {
				t.Fatalf("state after Remove with 20 readers: %v, want evicting", st)
			}
			start := time.Now()
			for len(c.Images()) > 0 && time.Since(start) < stalledTimeout+10*time.Second {
				time.Sleep(20 * time.Millisecond)
			}
			if n := len(c.Images()); n != 0 {
				t.Fatalf("after %v the image is still %v with %d readers", time.Since(start), c.Images()[0].State, c.Images()[0].Readers)
			}
			if fileExists(c.blobPath(d)) {
				t.Error("the blob is still on disk")
			}
			if used := c.Section().GetUsedBytes(); used != 0 {
				t.Errorf("used bytes %d after the eviction, want 0", used)
			}
		})
	}
}

// serveLimited serves c on loopback the way the appliance does: under the
// HTTP server's limits, with or without the fast path in front.
func serveLimited(t *testing.T, c *Cache, fast bool) string {
	t.Helper()
	hs, err := httpserver.New(httpserver.Config{ProgressTimeout: stalledTimeout, Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := hs.Listener(ln)
	if fast {
		l = c.Listener(l, ListenerConfig{})
	}
	mux := http.NewServeMux()
	mux.Handle(PathPrefix, c.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ctx, l, mux) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// smallWindowDial connects with a small receive buffer and never reads:
// the server's writes stall after a few megabytes.
func smallWindowDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	dialer := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	}}
	conn, err := dialer.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
