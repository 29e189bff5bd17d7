package httpserver

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tinyPair is pair with a client socket that advertises a small MSS and
// asks for a small receive buffer, as any unprivileged client can.
func tinyPair(t *testing.T, s *Server, mss, rcvbuf int) (*conn, net.Conn) {
	t.Helper()
	return pairDial(t, s, net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, mss); serr != nil {
				return
			}
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
		}); err != nil {
			return err
		}
		return serr
	}})
}

// A client that reads a trickle (a few KiB per progress timeout, below
// minAckProgress) is cut: its ACKs do not count as progress, or a client
// could hold a body, its file and an evicting image for as long as the
// body lasts by ACKing a segment per timeout.
func TestTrickleAckerIsCut(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, loops := range []bool{true, false} {
		s := serverWithLoops(t, timeout, loops)
		f, _ := patterned(t, 16<<20)
		c, client := tinyPair(t, s, 536, 8192)
		start := time.Now()
		ch := sendAsync(c, f, 16<<20)
		stop := make(chan struct{})
		read := make(chan int64, 1)
		go func() {
			var n int64
			defer func() { read <- n }()
			// 2 KiB every 50 ms: about 12 KiB per progress timeout,
			// ACKed in small segments all along.
			buf := make([]byte, 2048)
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				m, err := client.Read(buf)
				n += int64(m)
				if err != nil {
					return
				}
			}
		}()
		var r sendResult
		held := false
		select {
		case r = <-ch:
		case <-time.After(20 * timeout):
			held = true
			c.Close()
			r = <-ch
		}
		took := time.Since(start)
		close(stop)
		client.Close()
		got := <-read
		t.Logf("loops %v: SendFileAt = %d, %v after %v; client read %d B (%.0f B per progress timeout)",
			loops, r.n, r.err, took, got, float64(got)/float64(took/timeout))
		if held {
			t.Errorf("loops %v: a client reading ~%.0f B per progress timeout held its body for %v (%d timeouts)",
				loops, float64(got)/float64(took/timeout), took, took/timeout)
		} else if !errors.Is(r.err, os.ErrDeadlineExceeded) {
			t.Errorf("loops %v: SendFileAt = %v, want the deadline", loops, r.err)
		}
	}
}

// A client that never reads is cut within two progress timeouts: at the
// first its window may still have been filling (its kernel ACKed what
// it absorbed, indistinguishable from a reader), at the second it ACKed
// nothing more. The two timeouts count from the last byte its kernel
// took in (its receive queue's last growth, watched here): on a machine
// busy with other tests, filling an autotuned window of megabytes can
// itself take seconds, and every byte of it is progress.
func TestStalledClientCutWithinTwoTimeouts(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, loops := range []bool{true, false} {
		s := serverWithLoops(t, timeout, loops)
		f, _ := patterned(t, 64<<20)
		c, client := pair(t, s)
		rc, err := client.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ch := sendAsync(c, f, 64<<20)
		var r sendResult
		last, queued := start, -1
	watch:
		for {
			select {
			case r = <-ch:
				break watch
			case <-time.After(5 * time.Millisecond):
			}
			var q int
			if err := rc.Control(func(fd uintptr) { q, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
				t.Fatal(err)
			}
			if q != queued {
				last, queued = time.Now(), q
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("loops %v: SendFileAt still runs after 20 s", loops)
			}
		}
		took, idle := time.Since(start), time.Since(last)
		t.Logf("loops %v: cut after %v, %v after the client's queue last grew (%d B queued, %d B sent)", loops, took, idle, queued, r.n)
		if !errors.Is(r.err, os.ErrDeadlineExceeded) {
			t.Fatalf("loops %v: SendFileAt to a client that reads nothing = %d, %v; want the deadline", loops, r.n, r.err)
		}
		if took < timeout || idle > 2*timeout+timeout/2 {
			t.Errorf("loops %v: stalled client cut after %v, %v after its queue last grew; want at least one timeout (%v) and at most two after that", loops, took, idle, timeout)
		}
	}
}

// A body over corkAbove (startBody's Control with its getsockopt, the
// cork, rawWrite) allocates nothing either: 1 MiB, on the goroutine path
// (under bulkAbove).
func TestSendFileAtLargeBodyAllocatesNothing(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := patterned(t, 2<<20)
	c, client := pair(t, s)
	go func() { _, _ = io.Copy(io.Discard, client) }()
	head := []byte("HTTP/1.1 206 Partial Content\r\nContent-Length: 1048576\r\n\r\n")
	allocs := testing.AllocsPerRun(50, func() {
		if n, err := c.SendFileAt(head, f, 4096, 1<<20); n != 1<<20 || err != nil {
			t.Fatalf("SendFileAt = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per 1 MiB response, want 0", allocs)
	}
}
