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

// rawSetsockoptInt hands the kernel the value it was given. The value is
// a local of rawSetsockoptInt, passed by address through call6: were the
// stack to move in call6's prologue, the kernel would read freed stack.
// It fails that way when built with
// -gcflags=all=-d=maymorestack=runtime.mayMoreStackMove (every prologue
// moves the stack) and call6 not nosplit; .ci/run builds it so.
func TestRawSetsockoptKeepsItsValue(t *testing.T) {
	client, _ := acceptedPair(t)
	raw, err := client.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, rawOn := range []bool{true, false} {
		prev := SetRawCalls(rawOn)
		for i := range 50 {
			want := 100000 + i
			var serr, gerr error
			var got int
			if err := raw.Control(func(fd uintptr) {
				serr = rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, want)
				got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)
			}); err != nil {
				t.Fatal(err)
			}
			if serr != nil || gerr != nil || got != want {
				t.Fatalf("raw %t: setsockopt(TCP_NOTSENT_LOWAT, %d): %v; the socket has %d (%v)", rawOn, want, serr, got, gerr)
			}
		}
		SetRawCalls(prev)
	}
}

// acceptedPair is a loopback client and the server's connection for it,
// accepted through a Server's listener; both close at the end of the test.
func acceptedPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = s.Listener(ln).Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

// A connection's raw Read and Write fail the way net.TCPConn's do: the
// end of the stream is io.EOF, a passed deadline is a timeout, and a
// write to a peer that reset is an error naming the write.
func TestRawReadWriteErrors(t *testing.T) {
	client, sc := acceptedPair(t)
	if _, ok := sc.(*conn); !ok || sc.(*conn).raw == nil {
		t.Fatalf("accepted %T, want a *conn with a descriptor", sc)
	}

	// Bytes both ways.
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := io.ReadAtLeast(sc, buf, 4); err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	big := make([]byte, 3<<20) // more than a socket takes at once
	got := make(chan int, 1)
	go func() {
		n, _ := io.Copy(io.Discard, io.LimitReader(client, int64(len(big))))
		got <- int(n)
	}()
	if n, err := sc.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write of %d bytes = %d, %v", len(big), n, err)
	}
	if n := <-got; n != len(big) {
		t.Fatalf("the client read %d bytes, want %d", n, len(big))
	}

	// A deadline that passes while Read waits.
	if err := sc.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := sc.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline = %v, want a timeout", err)
	}
	if err := sc.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	// The client resets: the next write fails; then the read ends.
	if err := client.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	client.Close()
	time.Sleep(50 * time.Millisecond)
	var werr error
	for range 10 { // the first write after a reset may still be taken
		if _, werr = sc.Write([]byte("pong")); werr != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var op *net.OpError
	if !errors.As(werr, &op) || op.Op != "write" ||
		!(errors.Is(werr, syscall.ECONNRESET) || errors.Is(werr, syscall.EPIPE)) {
		t.Fatalf("Write after a reset = %v, want a write *net.OpError with ECONNRESET or EPIPE", werr)
	}
	if _, err := sc.Read(buf); err == nil {
		t.Fatal("Read after a reset succeeded")
	}
	sc.Close()
	if _, err := sc.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v, want net.ErrClosed", err)
	}
}

// The end of the stream is io.EOF.
func TestRawReadEOF(t *testing.T) {
	client, sc := acceptedPair(t)
	if _, err := client.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	client.Close()
	b, err := io.ReadAll(sc)
	if err != nil || string(b) != "last" {
		t.Fatalf("ReadAll = %q, %v; want the bytes, then EOF", b, err)
	}
	if n, err := sc.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("Read at the end = %d, %v; want io.EOF", n, err)
	}
}
