package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDownloadDropsBodies: without CopyBodies a body is counted and its
// length checked but never copied into the buffer, the connection stays
// usable for the next request (its headers are not dropped), and a body
// cut short still fails.
func TestDownloadDropsBodies(t *testing.T) {
	big := bytes.Repeat([]byte("initrd!!"), 3<<20/8) // 3 MiB: many reads
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = w.Write(big)
		case "/short":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = w.Write(big[:len(big)/2])
			panic(http.ErrAbortHandler) // cut the body short
		case "/script":
			_, _ = w.Write([]byte("#!ipxe\nboot\n"))
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	ctx := context.Background()

	for _, copyBodies := range []bool{false, true} {
		t.Run("copy="+strconv.FormatBool(copyBodies), func(t *testing.T) {
			conns.Store(0)
			buf := make([]byte, 256<<10)
			c := newMachineClient(netip.Addr{}, httpSpec{IdleTimeout: 5 * time.Second, MaxScript: 1 << 10, CopyBodies: copyBodies}, buf)
			defer c.CloseIdleConnections()
			for i := range 2 {
				n, err := download(ctx, c, srv.URL+"/big", "", buf)
				if err != nil || n != int64(len(big)) {
					t.Fatalf("download %d: %d bytes, %v; want %d", i, n, err, len(big))
				}
				// A script on the same connection: its status line and
				// headers must have been read, not dropped.
				s, err := getScript(ctx, c, srv.URL+"/script", 1<<10)
				if err != nil || s != "#!ipxe\nboot\n" {
					t.Fatalf("script after download %d: %q, %v", i, s, err)
				}
			}
			if got := conns.Load(); got != 1 {
				t.Errorf("%d connections for four requests; want 1 (keep-alive)", got)
			}
			// What the transport had read ahead with the headers (its
			// 4 KiB buffer) is copied either way.
			copied := bytes.Contains(buf[8<<10:], []byte("initrd!!"))
			if copied != copyBodies {
				t.Errorf("body bytes in the buffer: %v; want %v", copied, copyBodies)
			}
			n, err := download(ctx, c, srv.URL+"/short", "", buf)
			if err == nil || n >= int64(len(big)) {
				t.Fatalf("short body: %d bytes, %v; want an error", n, err)
			}
			if r := classify(err); r != "short-body" && !errors.Is(err, errHTTPSize) {
				t.Errorf("short body classified %q (%v)", r, err)
			}
		})
	}
}

// TestDropTakesOnlyWhatIsAsked: a drop never takes more than the slice it
// was given, even with the next bytes (another response) already queued.
func TestDropTakesOnlyWhatIsAsked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Small enough to sit unread in any default receive buffer: the
	// test waits until all of it is queued.
	const body, tail = 40 << 10, "HTTP/1.1 200 OK\r\n"
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(append(bytes.Repeat([]byte{'x'}, body), tail...))
		_, _ = c.Read(make([]byte, 1)) // hold the connection until the client closes
	}()
	buf := make([]byte, 256<<10)
	c := newMachineClient(netip.Addr{}, httpSpec{IdleTimeout: 5 * time.Second, RcvBuf: 256 << 10}, buf)
	conn, err := c.Transport.(*http.Transport).DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ic := conn.(*idleConn)
	if ic.sink == nil {
		t.Fatal("no sink on a plain TCP connection")
	}
	// Wait until the whole write is queued, so that a drop could take it.
	deadline := time.Now().Add(5 * time.Second)
	for queued(t, ic) < body+len(tail) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes queued; want %d", queued(t, ic), body+len(tail))
		}
		time.Sleep(time.Millisecond)
	}
	for left := body; left > 0; {
		n, err := ic.Read(buf[:min(left, 7<<10+3)])
		if err != nil {
			t.Fatalf("drop with %d left: %v", left, err)
		}
		left -= n
	}
	rest := make([]byte, 64)
	n, err := ic.Read(rest)
	if err != nil || string(rest[:n]) != tail {
		t.Fatalf("after the drops read %q, %v; want %q", rest[:n], err, tail)
	}
}

// queued is how many bytes wait in c's receive queue (FIONREAD).
func queued(t *testing.T, c *idleConn) int {
	t.Helper()
	var n int
	var serr error
	if err := c.raw.Control(func(fd uintptr) { n, serr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return n
}
