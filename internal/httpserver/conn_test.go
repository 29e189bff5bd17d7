package httpserver

import (
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
)

// The progress deadline costs no allocation per response: a small write
// and a sendfile of a file range on a connection whose peer drains it.
func TestConnAllocatesNothingPerResponse(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		peer, err := ln.Accept()
		if err != nil {
			return
		}
		defer peer.Close()
		buf := make([]byte, 64<<10)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := newConn(raw, s, netip.Addr{})
	s.open.Add(1)
	f, err := os.Open(bigFile(t, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := []byte("HTTP/1.1 206 Partial Content\r\nContent-Length: 4096\r\n\r\n")
	lr := &io.LimitedReader{R: f}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.Write(head); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Seek(8192, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		lr.N = 4096
		if n, err := c.ReadFrom(lr); n != 4096 || err != nil {
			t.Fatalf("ReadFrom = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per response, want 0", allocs)
	}
	c.Close()
	<-drained
	if got := s.open.Load(); got != 0 {
		t.Errorf("open connections after Close: %d", got)
	}
}
