package httpserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/metrictest"
)

// niceOf is the nice value of one of this process's threads, from field
// 19 of /proc/self/task/TID/stat.
func niceOf(t *testing.T, tid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	// The command name, in parentheses, may hold spaces: count after it.
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	n, err := strconv.Atoi(fields[16]) // field 19 of the whole line
	if err != nil {
		t.Fatalf("stat of thread %d: %q: %v", tid, s, err)
	}
	return n
}

// runningLoop is the thread of a loop of s that runs, or 0.
func runningLoop(s *Server) int {
	for _, l := range s.bulk.loops {
		if tid := l.tid.Load(); tid != 0 {
			return int(tid)
		}
	}
	return 0
}

// bulkLoad is the number of jobs s's loops hold.
func bulkLoad(s *Server) (n int64) {
	for _, l := range s.bulk.loops {
		n += l.load.Load()
	}
	return n
}

// A large body goes out from a loop whose thread runs at bulkNice, while
// the process's other threads keep their priority; a small one does not
// start a loop; the loop ends once idle.
func TestBulkRunsOnANicedThreadAndEnds(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f, data := patterned(t, 16<<20)
	start := niceOf(t, os.Getpid())
	if start > bulkNice {
		t.Skipf("the test runs at nice %d, above the loops' %d", start, bulkNice)
	}

	small, reader := pair(t, s)
	go func() { _, _ = io.Copy(io.Discard, reader) }()
	if n, err := small.SendFileAt(nil, f, 0, bulkAbove-1); err != nil || n != bulkAbove-1 {
		t.Fatalf("SendFileAt of a small body = %d, %v", n, err)
	}
	if tid := runningLoop(s); tid != 0 {
		t.Fatalf("a body under bulkAbove started a loop (thread %d)", tid)
	}

	c, client := pair(t, s)
	done := make(chan error, 1)
	go func() {
		_, err := c.SendFileAt(nil, f, 0, int64(len(data)))
		done <- err
	}()
	// The client reads nothing yet: the body waits on the loop.
	deadline := time.Now().Add(5 * time.Second)
	tid := 0
	for tid == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		tid = runningLoop(s)
	}
	if tid == 0 {
		t.Fatal("no loop runs while a large body is sent")
	}
	if got := niceOf(t, tid); got != bulkNice {
		t.Errorf("the loop's thread runs at nice %d, want %d", got, bulkNice)
	}
	if got := niceOf(t, os.Getpid()); got != start {
		t.Errorf("the process's main thread runs at nice %d, want %d as before", got, start)
	}
	got, err := io.ReadAll(io.LimitReader(client, int64(len(data))))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the client read %d bytes (%v) that are not the body", len(got), err)
	}
	if err := <-done; err != nil {
		t.Fatalf("SendFileAt = %v", err)
	}
	if got := s.bulk.served.Load(); got != 1 {
		t.Errorf("%d bodies went through a loop, want 1", got)
	}
	// The loop ends, and its thread with it, once idle.
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	for {
		_, err := os.Stat(task)
		if runningLoop(s) == 0 && err != nil {
			break
		}
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatalf("the loop (running: %v) or its niced thread %d lives on long after its last body", runningLoop(s) != 0, tid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The next body starts a loop again.
	go func() { _, _ = io.Copy(io.Discard, client) }()
	if n, err := c.SendFileAt(nil, f, 0, int64(len(data))); err != nil || n != int64(len(data)) {
		t.Fatalf("SendFileAt after the loop ended = %d, %v", n, err)
	}
	if got := s.bulk.served.Load(); got != 2 {
		t.Errorf("%d bodies went through a loop, want 2", got)
	}
}

// Close ends a large body its client is not reading at once, with
// net.ErrClosed, long before the progress timeout.
func TestBulkCloseAborts(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := patterned(t, 64<<20)
	c, _ := pair(t, s)
	done := make(chan error, 1)
	go func() {
		_, err := c.SendFileAt(nil, f, 0, 64<<20)
		done <- err
	}()
	// Wait until a loop has the body, so that Close aborts it there.
	for waited := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		if bulkLoad(s) > 0 {
			break
		}
		if time.Since(waited) > 5*time.Second {
			t.Fatal("no loop took the body")
		}
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, net.ErrClosed) {
			t.Errorf("SendFileAt ended by Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SendFileAt ran on 5 s after Close")
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	// Well under a deadline sweep (a second at this ProgressTimeout):
	// the abort wakes the loop, it does not wait for the sweep.
	if d := time.Since(start); d > bulkSweepMax/2 {
		t.Errorf("Close took %v to end the body", d)
	}
}

// A client that reads slowly but steadily keeps its body past several
// progress timeouts, on a loop and on the connection's goroutine: each
// time the socket takes bytes counts as progress. (The socket takes more
// only once it has room for a good part of what it holds, half of
// TCP_NOTSENT_LOWAT: 2 MiB here, a third of a second at this client's
// pace. TestSlowReaderAckingIsNotCut is a client slower than that.)
func TestBulkSlowClientIsNotCut(t *testing.T) {
	const timeout = time.Second
	for _, loops := range []bool{true, false} {
		s := serverWithLoops(t, timeout, loops)
		f, data := patterned(t, 24<<20)
		c, client := pair(t, s)
		got := make(chan []byte, 1)
		start := time.Now()
		go func() {
			// 128 KiB every 20 ms: about 6 MiB/s, so the body takes
			// seconds, longer than what the sockets' buffers hold.
			b, _ := io.ReadAll(io.LimitReader(&slowReader{r: client, pause: 20 * time.Millisecond, most: 128 << 10}, int64(len(data))))
			got <- b
		}()
		n, err := c.SendFileAt(nil, f, 0, int64(len(data)))
		if err != nil || n != int64(len(data)) {
			t.Fatalf("loops %v: SendFileAt to a slow but steady client = %d, %v after %v", loops, n, err, time.Since(start))
		}
		if b := <-got; !bytes.Equal(b, data) {
			t.Fatalf("loops %v: the client read %d bytes that are not the body", loops, len(b))
		}
		if took := time.Since(start); took < 2*timeout {
			t.Fatalf("loops %v: the body took %v: not slow enough to outlast the progress timeout", loops, took)
		}
		if got := metrictest.Counter(t, s.stalled); got != 0 {
			t.Errorf("loops %v: stalled_responses_total = %v, want 0", loops, got)
		}
		if loops && s.bulk.served.Load() != 1 {
			t.Errorf("the body did not go through a loop")
		}
	}
}

// Many large bodies at once, more than there are loops, to clients that
// read at different speeds: each gets exactly its range.
func TestBulkManyAtOnce(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f, data := patterned(t, 8<<20)
	const n = 48
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		c, client := pair(t, s)
		off, size := int64(i*4099), int64(bulkAbove+i*65537)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if got, err := c.SendFileAt([]byte("head\n"), f, off, size); err != nil || got != size {
				errs <- fmt.Errorf("body %d: SendFileAt = %d, %v", i, got, err)
			}
		}()
		go func() {
			defer wg.Done()
			r := io.Reader(client)
			if i%3 == 0 { // a slow reader
				r = &slowReader{r: client, pause: time.Millisecond}
			}
			got, err := io.ReadAll(io.LimitReader(r, 5+size))
			want := append([]byte("head\n"), data[off:off+size]...)
			if err != nil || !bytes.Equal(got, want) {
				errs <- fmt.Errorf("body %d: the client read %d bytes (%v), not its %d", i, len(got), err, len(want))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := s.bulk.served.Load(); got != n {
		t.Errorf("%d of the %d bodies went through a loop", got, n)
	}
}

type slowReader struct {
	r     io.Reader
	pause time.Duration
	most  int // bytes per read; 0: 64 KiB
}

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.pause)
	most := s.most
	if most == 0 {
		most = 64 << 10
	}
	return s.r.Read(p[:min(len(p), most)])
}

// A client that reads slower than its socket's unsent budget drains is a
// slow reader, not a stalled one: its socket turns writable only after
// half of the budget has gone (2 MiB here, much longer than the progress
// timeout), but it ACKs data all along, and that is progress.
func TestSlowReaderAckingIsNotCut(t *testing.T) {
	const timeout = 500 * time.Millisecond
	for _, loops := range []bool{true, false} {
		s := serverWithLoops(t, timeout, loops)
		f, data := patterned(t, 8<<20)
		c, client := pair(t, s)
		// A fixed receive buffer (no autotuning to 6 MiB): most of the
		// body waits in the server's socket, not in the client's.
		if err := client.(*net.TCPConn).SetReadBuffer(1 << 20); err != nil {
			t.Fatal(err)
		}
		got := make(chan []byte, 1)
		start := time.Now()
		go func() {
			// 128 KiB every 50 ms: about 2.5 MiB/s, so 2 MiB drains in
			// about 0.8 s, more than a progress timeout.
			// (io.ReadAll would read into a small buffer at first.)
			b, buf := make([]byte, 0, len(data)), make([]byte, 128<<10)
			for len(b) < len(data) {
				time.Sleep(50 * time.Millisecond)
				n, err := client.Read(buf[:min(len(buf), len(data)-len(b))])
				b = append(b, buf[:n]...)
				if err != nil {
					break
				}
			}
			got <- b
		}()
		n, err := c.SendFileAt(nil, f, 0, int64(len(data)))
		if err != nil || n != int64(len(data)) {
			t.Fatalf("loops %v: SendFileAt to a slow reader that ACKs all along = %d, %v after %v", loops, n, err, time.Since(start))
		}
		if b := <-got; !bytes.Equal(b, data) {
			t.Fatalf("loops %v: the client read %d bytes that are not the body", loops, len(b))
		}
		if took := time.Since(start); took < 4*timeout {
			t.Fatalf("loops %v: the body took %v: not slow enough to outlast the progress timeout", loops, took)
		}
		if got := metrictest.Counter(t, s.stalled); got != 0 {
			t.Errorf("loops %v: stalled_responses_total = %v, want 0", loops, got)
		}
	}
}

// A loop sends to at most bulkActive bodies at once, and a body whose
// client takes nothing gives up its place after bulkTurnTime: clients
// that read, queued behind more stalled ones than there are places, get
// their whole bodies while the stalled ones still hold theirs; then the
// stalled ones read and get theirs, whole.
func TestBulkTurns(t *testing.T) {
	s, err := New(Config{ProgressTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s.bulk = newBulkLoops(1, time.Minute)
	const size = 16 << 20
	f, data := patterned(t, size)
	small := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
		})
	}}
	type body struct {
		c      *conn
		client net.Conn
		sent   chan error
	}
	start := func(d net.Dialer) body {
		c, client := pairDial(t, s, d)
		b := body{c: c, client: client, sent: make(chan error, 1)}
		go func() {
			n, err := c.SendFileAt(nil, f, 0, size)
			if err == nil && n != size {
				err = fmt.Errorf("sent %d of %d", n, size)
			}
			b.sent <- err
		}()
		return b
	}
	readAll := func(b body) error {
		got, err := io.ReadAll(io.LimitReader(b.client, size))
		if err != nil || !bytes.Equal(got, data) {
			return fmt.Errorf("read %d bytes (%v), not the body", len(got), err)
		}
		return <-b.sent
	}
	var stalled []body
	for range bulkActive + 8 {
		stalled = append(stalled, start(small))
	}
	for deadline := time.Now().Add(10 * time.Second); bulkLoad(s) < bulkActive+8; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the loop holds %d bodies, want %d", bulkLoad(s), bulkActive+8)
		}
	}
	var readers []body
	for range 8 {
		readers = append(readers, start(net.Dialer{}))
	}
	done := make(chan error, len(readers))
	for _, b := range readers {
		go func() { done <- readAll(b) }()
	}
	timeout := time.After(20 * time.Second)
	for range readers {
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-timeout:
			t.Fatalf("the readers did not get their bodies in 20 s behind %d stalled ones (turns given up: %d)",
				len(stalled), s.bulk.yields.Load())
		}
	}
	if got := bulkLoad(s); got != int64(len(stalled)) {
		t.Errorf("the loop holds %d bodies after the readers', want the %d stalled", got, len(stalled))
	}
	for _, b := range stalled {
		go func() { done <- readAll(b) }()
	}
	for range stalled {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if p := s.bulk.peak.Load(); p > bulkActive {
		t.Errorf("the loop sent to %d bodies at once, want at most %d", p, bulkActive)
	}
	if s.bulk.yields.Load() == 0 {
		t.Error("no body gave up its turn")
	}
}

// stalledBodies starts n bodies of size on s to clients with small
// receive buffers that never read, and returns what each SendFileAt
// returned, as it returns.
func stalledBodies(t *testing.T, s *Server, f *os.File, size int64, n int) <-chan error {
	t.Helper()
	small := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10)
		})
	}}
	ended := make(chan error, n)
	for range n {
		c, _ := pairDial(t, s, small)
		go func() {
			_, err := c.SendFileAt(nil, f, 0, size)
			ended <- err
		}()
	}
	return ended
}

// Clients that stop reading are cut after the progress timeout while
// more bodies wait than a loop has places: a turn given back and begun
// again does not count as progress when the client took nothing while it
// waited.
func TestBulkStalledCutWhileOthersWait(t *testing.T) {
	const timeout = time.Second
	s := serverWithLoops(t, timeout, true)
	s.bulk = newBulkLoops(1, timeout)
	const size = 16 << 20
	f, _ := patterned(t, size)
	n := bulkActive + 8
	ended := stalledBodies(t, s, f, size, n)
	deadline := time.After(4*timeout + 4*time.Second)
	for i := range n {
		select {
		case err := <-ended:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("a stalled body ended with %v, want a deadline error", err)
			}
		case <-deadline:
			t.Fatalf("%d of %d stalled bodies cut %v after a %v progress timeout (turns given up: %d)",
				i, n, 4*timeout+4*time.Second, timeout, s.bulk.yields.Load())
		}
	}
}

// A stalled client is cut although other bodies come and go on its loop
// (each arrival made every turn past its time end and begin again).
func TestBulkStalledCutDespiteArrivals(t *testing.T) {
	const timeout = time.Second
	s := serverWithLoops(t, timeout, true)
	s.bulk = newBulkLoops(1, timeout)
	f, _ := patterned(t, 16<<20)
	ended := stalledBodies(t, s, f, 16<<20, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a 2 MiB body to a reading client every 150 ms
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			c, client := pair(t, s)
			go func() { _, _ = io.Copy(io.Discard, client) }()
			if n, err := c.SendFileAt(nil, f, 0, bulkAbove); err != nil || n != bulkAbove {
				t.Errorf("a reader's body: %d, %v", n, err)
			}
			c.Close()
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	select {
	case err := <-ended:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the stalled body ended with %v, want a deadline error", err)
		}
	case <-time.After(4*timeout + 2*time.Second):
		t.Fatalf("the stalled body is still held %v after a %v progress timeout (turns given up: %d)",
			4*timeout+2*time.Second, timeout, s.bulk.yields.Load())
	}
	// Two bodies at most, far fewer than the places: no turn ends early.
	if y := s.bulk.yields.Load(); y != 0 {
		t.Errorf("%d turns given up while places were free", y)
	}
}

// A loop sends to bulkActive bodies, or to one in bulkWaitTurns of those it
// holds when that is more, so that the last in line waits about
// bulkWaitTurns turns however long the line.
func TestBulkPlaces(t *testing.T) {
	for _, c := range []struct{ held, want int }{
		{0, bulkActive}, {bulkActive, bulkActive}, {bulkActive * bulkWaitTurns, bulkActive},
		{4096, 4096 / bulkWaitTurns}, {2048, 2048 / bulkWaitTurns},
	} {
		if got := bulkPlaces(c.held); got != c.want {
			t.Errorf("bulkPlaces(%d) = %d, want %d", c.held, got, c.want)
		}
	}
	// The wait of the last in line, in turns: (held - places) / places.
	for _, held := range []int{100, 1000, 4096, 100000} {
		p := bulkPlaces(held)
		if turns := (held - p + p - 1) / p; turns > bulkWaitTurns {
			t.Errorf("%d bodies: the last waits %d turns, want at most %d", held, turns, bulkWaitTurns)
		}
	}
}
