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
