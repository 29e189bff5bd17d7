package httpserver

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/metrictest"
)

// Attacks on the bulk loops from clients on loopback sockets: every one
// must end SendFileAt with an error within a bound, and leave the loops
// with no job and, once idle, not running.

// sendAsync starts SendFileAt of n bytes of f on c and reports its end.
func sendAsync(c *conn, f *os.File, n int64) <-chan sendResult {
	ch := make(chan sendResult, 1)
	go func() {
		sent, err := c.SendFileAt([]byte("HTTP/1.1 200 OK\r\n\r\n"), f, 0, n)
		ch <- sendResult{sent, err}
	}()
	return ch
}

type sendResult struct {
	n   int64
	err error
}

func waitResult(t *testing.T, ch <-chan sendResult, d time.Duration, what string) sendResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		t.Fatalf("%s: SendFileAt still runs after %v", what, d)
	}
	return sendResult{}
}

// waitLoaded waits until s's loops hold at least n jobs.
func waitLoaded(t *testing.T, s *Server, n int64) {
	t.Helper()
	for start := time.Now(); bulkLoad(s) < n; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the loops hold %d jobs, want %d", bulkLoad(s), n)
		}
	}
}

// waitLoopsEnd waits until s's loops hold no job and none runs.
func waitLoopsEnd(t *testing.T, s *Server) {
	t.Helper()
	for start := time.Now(); bulkLoad(s) != 0 || runningLoop(s) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 3*time.Second {
			t.Fatalf("the loops hold %d jobs and loop thread %d runs long after the last body", bulkLoad(s), runningLoop(s))
		}
	}
}

func resetClose(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// A client that reads part of a large body and resets the connection.
func TestAttackBulkResetMidBody(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := patterned(t, 32<<20)
	c, client := pair(t, s)
	ch := sendAsync(c, f, 32<<20)
	waitLoaded(t, s, 1)
	if _, err := io.ReadFull(client, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	resetClose(t, client)
	r := waitResult(t, ch, 5*time.Second, "reset client")
	if r.err == nil || r.n >= 32<<20 {
		t.Fatalf("SendFileAt to a reset client = %d, %v; want an error", r.n, r.err)
	}
	waitLoopsEnd(t, s)
}

// A client that half-closes and stops reading: the progress timeout
// ends its body, counted as stalled.
func TestAttackBulkHalfCloseStopsReading(t *testing.T) {
	s, err := New(Config{ProgressTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := patterned(t, 32<<20)
	c, client := pair(t, s)
	ch := sendAsync(c, f, 32<<20)
	if _, err := io.ReadFull(client, make([]byte, 256<<10)); err != nil {
		t.Fatal(err)
	}
	if err := client.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, ch, 5*time.Second, "half-closed client")
	if !errors.Is(r.err, os.ErrDeadlineExceeded) {
		t.Fatalf("SendFileAt to a half-closed client that stopped reading = %d, %v; want the deadline", r.n, r.err)
	}
	if got := metrictest.Counter(t, s.stalled); got != 1 {
		t.Errorf("stalled_responses_total = %v, want 1", got)
	}
	waitLoopsEnd(t, s)
}

// A client that reads a byte a second holds its body only until the
// progress timeout.
func TestAttackBulkOneBytePerSecond(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := patterned(t, 16<<20)
	c, client := pair(t, s)
	ch := sendAsync(c, f, 16<<20)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		b := make([]byte, 1)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			if _, err := client.Read(b); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	r := waitResult(t, ch, 8*time.Second, "1 B/s client")
	if !errors.Is(r.err, os.ErrDeadlineExceeded) {
		t.Fatalf("SendFileAt to a 1 B/s client = %d, %v; want the deadline", r.n, r.err)
	}
	if got := metrictest.Counter(t, s.stalled); got != 1 {
		t.Errorf("stalled_responses_total = %v, want 1", got)
	}
	waitLoopsEnd(t, s)
}

// Hundreds of clients each start a large body and vanish, half with a
// reset and half with a plain close of unread data.
func TestAttackBulkManyVanish(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Larger than a client that reads nothing lets into its socket
	// buffers, so that no body can end without an error.
	f, _ := patterned(t, 16<<20)
	const n = 300
	chs := make([]<-chan sendResult, n)
	clients := make([]net.Conn, n)
	for i := range n {
		c, client := pair(t, s)
		clients[i] = client
		chs[i] = sendAsync(c, f, 16<<20)
	}
	waitLoaded(t, s, n/2)
	for i, client := range clients {
		if i%2 == 0 {
			resetClose(t, client)
		} else {
			client.Close()
		}
	}
	deadline := time.After(8 * time.Second)
	for i, ch := range chs {
		select {
		case r := <-ch:
			if r.err == nil {
				t.Errorf("body %d: SendFileAt to a vanished client = %d, nil", i, r.n)
			}
		case <-deadline:
			t.Fatalf("body %d: SendFileAt still runs 8 s after its client vanished (loops hold %d)", i, bulkLoad(s))
		}
	}
	waitLoopsEnd(t, s)
}

// Close of many connections at once, their bodies in flight on the loops:
// every SendFileAt and every Close returns, and the loops end.
func TestAttackBulkCloseManyInFlight(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := patterned(t, 16<<20)
	const n = 100
	conns := make([]*conn, n)
	chs := make([]<-chan sendResult, n)
	for i := range n {
		c, _ := pair(t, s)
		conns[i] = c
		chs[i] = sendAsync(c, f, 16<<20)
	}
	waitLoaded(t, s, n)
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	closed := make(chan struct{})
	go func() { wg.Wait(); close(closed) }()
	for i, ch := range chs {
		r := waitResult(t, ch, 5*time.Second, "closed connection")
		if !errors.Is(r.err, net.ErrClosed) {
			t.Errorf("body %d: SendFileAt on a closed connection = %d, %v; want net.ErrClosed", i, r.n, r.err)
		}
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	waitLoopsEnd(t, s)
}

// The file shrinks while a loop sends it: SendFileAt ends with
// io.ErrUnexpectedEOF, short, and the loop does not spin on it.
func TestAttackBulkFileTruncatedWhileSending(t *testing.T) {
	for _, to := range []int64{0, 3 << 20} {
		s, err := New(Config{ProgressTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		f, _ := patterned(t, 32<<20)
		c, client := pair(t, s)
		ch := sendAsync(c, f, 32<<20)
		waitLoaded(t, s, 1)
		if err := os.Truncate(f.Name(), to); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.Copy(io.Discard, client) }()
		r := waitResult(t, ch, 5*time.Second, "truncated file")
		if !errors.Is(r.err, io.ErrUnexpectedEOF) || r.n >= 32<<20 {
			t.Fatalf("truncated to %d: SendFileAt = %d, %v; want short with io.ErrUnexpectedEOF", to, r.n, r.err)
		}
		waitLoopsEnd(t, s)
	}
}

// Close at every moment of a large body's start (before the job is on a
// loop, while it is handed over, once it runs): SendFileAt and Close
// always return, the job never stays on a loop.
func TestAttackBulkCloseRacesStart(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := patterned(t, 8<<20)
	for i := range 200 {
		c, _ := pair(t, s)
		ch := sendAsync(c, f, 8<<20)
		time.Sleep(time.Duration(i%20) * 50 * time.Microsecond)
		closed := make(chan struct{})
		go func() { c.Close(); close(closed) }()
		r := waitResult(t, ch, 5*time.Second, "connection closed as its body starts")
		if r.err == nil {
			t.Fatalf("round %d: SendFileAt on a connection closed before the body went out = %d, nil", i, r.n)
		}
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: Close did not return", i)
		}
	}
	waitLoopsEnd(t, s)
}
