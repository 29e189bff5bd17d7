package httpserver

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/metrictest"
)

// patterned is a file whose every byte tells its offset apart.
func patterned(t *testing.T, size int) (*os.File, []byte) {
	t.Helper()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i>>8)
	}
	p := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, data
}

// serverWithLoops is a Server with the progress timeout given, whose
// large bodies go out on bulk loops, or without loops on their
// connection's goroutine.
func serverWithLoops(t *testing.T, timeout time.Duration, loops bool) *Server {
	t.Helper()
	s, err := New(Config{ProgressTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	if !loops {
		s.bulk = nil
	}
	return s
}

// pair is a server-side conn and the client end of a loopback TCP
// connection.
func pair(t *testing.T, s *Server) (*conn, net.Conn) {
	t.Helper()
	return pairDial(t, s, net.Dialer{})
}

// pairDial is pair with the client's socket dialed by d.
func pairDial(t *testing.T, s *Server, d net.Dialer) (*conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	raw, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s.open.Add(1)
	c := newConn(raw, s, netip.Addr{})
	t.Cleanup(func() { c.Close() })
	return c, client
}

// SendFileAt sends the head and exactly the range asked for, small and
// large (several sendfile calls against a reader that drains slowly),
// reads the file at the offset given and leaves the file's own offset
// where it was.
func TestSendFileAtSendsHeadAndRange(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f, data := patterned(t, 8<<20)
	if _, err := f.Seek(123, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ off, n int64 }{
		{0, 1}, {4096, 4096}, {1, 100_000}, {3 << 20, 5 << 20}, {int64(len(data)) - 10, 10},
	} {
		c, client := pair(t, s)
		head := []byte("HTTP/1.1 206 Partial Content\r\nContent-Length: x\r\n\r\n")
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(io.LimitReader(client, int64(len(head))+tc.n))
			got <- b
		}()
		n, err := c.SendFileAt(head, f, tc.off, tc.n)
		if err != nil || n != tc.n {
			t.Fatalf("SendFileAt(off %d, n %d) = %d, %v", tc.off, tc.n, n, err)
		}
		b := <-got
		want := append(append([]byte{}, head...), data[tc.off:tc.off+tc.n]...)
		if !bytes.Equal(b, want) {
			t.Fatalf("off %d n %d: the client got %d bytes that differ from the head and the range (%d bytes)", tc.off, tc.n, len(b), len(want))
		}
		if pos, _ := f.Seek(0, io.SeekCurrent); pos != 123 {
			t.Fatalf("the file's offset moved to %d", pos)
		}
	}
}

// A client that stops reading ends SendFileAt at ProgressTimeout, with the
// deadline's error, not a hang, and counts a stalled response: a large
// body on a bulk loop, and one sent on the connection's goroutine (no
// loops).
func TestSendFileAtStalledClient(t *testing.T) {
	for _, loops := range []bool{true, false} {
		s := serverWithLoops(t, 300*time.Millisecond, loops)
		f, _ := patterned(t, 64<<20)
		c, _ := pair(t, s)
		start := time.Now()
		type result struct {
			n   int64
			err error
		}
		res := make(chan result, 1)
		go func() {
			n, err := c.SendFileAt([]byte("HTTP/1.1 200 OK\r\n\r\n"), f, 0, 64<<20)
			res <- result{n, err}
		}()
		var (
			n   int64
			err error
		)
		select {
		case r := <-res:
			n, err = r.n, r.err
		case <-time.After(10 * time.Second):
			c.Close()
			<-res
			t.Fatalf("loops %v: SendFileAt to a client that reads nothing ran on past 10 s", loops)
		}
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Errorf("loops %v: aborted after %v, before the 300 ms progress timeout", loops, took)
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("loops %v: SendFileAt to a client that reads nothing = %d, %v; want a deadline error", loops, n, err)
		}
		if n >= 64<<20 {
			t.Fatalf("loops %v: sent everything (%d) to a client that reads nothing", loops, n)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("loops %v: took %v", loops, d)
		}
		if got := metrictest.Counter(t, s.stalled); got != 1 {
			t.Errorf("loops %v: stalled_responses_total = %v, want 1", loops, got)
		}
		if loops && s.bulk.served.Load() != 1 {
			t.Errorf("the body did not go through a loop")
		}
	}
}

// SendFileAt allocates nothing per response.
func TestSendFileAtAllocatesNothing(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := patterned(t, 1<<20)
	c, client := pair(t, s)
	go func() { _, _ = io.Copy(io.Discard, client) }()
	head := []byte("HTTP/1.1 206 Partial Content\r\nContent-Length: 4096\r\n\r\n")
	allocs := testing.AllocsPerRun(200, func() {
		if n, err := c.SendFileAt(head, f, 8192, 4096); n != 4096 || err != nil {
			t.Fatalf("SendFileAt = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per response, want 0", allocs)
	}
}

// A file shorter than the range asked for (truncated under the cache)
// ends SendFileAt with an error, small range and corked large one: a nil
// error would let the caller keep the connection alive after a body
// shorter than its Content-Length, and the client would read the next
// response as body.
func TestSendFileAtShortFileIsAnError(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := patterned(t, 1<<20)
	for _, n := range []int64{4096, 2 << 20} {
		c, client := pair(t, s)
		go func() { _, _ = io.Copy(io.Discard, client) }()
		off := int64(1<<20) - 100
		got, err := c.SendFileAt([]byte("HTTP/1.1 200 OK\r\n\r\n"), f, off, n)
		if err == nil {
			t.Fatalf("SendFileAt(off %d, n %d) past the file's end = %d, nil; want an error", off, n, got)
		}
		if got != 100 {
			t.Fatalf("SendFileAt past the end sent %d; want the 100 bytes there are", got)
		}
	}
}

// A caller's SetWriteDeadline (or SetDeadline) lasts only until the next
// write: one that clears the deadline right after a write must not leave
// the next response to a client that stops reading without the progress
// timeout (progress skips a deadline it believes is recent).
//
// The body is sent on the connection's goroutine (no bulk loops), where
// the write deadline is what ends it.
func TestSendFileAtProgressAfterCallerDeadline(t *testing.T) {
	s, err := New(Config{ProgressTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.bulk = nil
	f, _ := patterned(t, 64<<20)
	for _, clear := range []func(c *conn) error{
		func(c *conn) error { return c.SetWriteDeadline(time.Time{}) },
		func(c *conn) error { return c.SetDeadline(time.Time{}) },
	} {
		c, _ := pair(t, s)
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := clear(c); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.SendFileAt([]byte("HTTP/1.1 200 OK\r\n\r\n"), f, 0, 64<<20)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("SendFileAt to a client that reads nothing = %v; want a deadline error", err)
			}
		case <-time.After(5 * time.Second):
			c.Close()
			<-done
			t.Fatal("SendFileAt to a client that reads nothing ran on past 5 s after a cleared deadline")
		}
	}
}
