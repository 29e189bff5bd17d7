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
	"testing"
	"time"
)

// pacedClients starts n bodies of 16 MiB of f on s to clients with the
// given MSS and receive buffer that read chunk bytes every interval. It
// returns the SendFileAt results, as they end, and a stop func that closes
// everything and waits.
func pacedClients(t *testing.T, s *Server, f *os.File, n, mss, rcvbuf, chunk int, every time.Duration) (<-chan sendResult, func()) {
	ended := make(chan sendResult, n)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var conns []*conn
	for range n {
		c, client := tinyPair(t, s, mss, rcvbuf)
		conns = append(conns, c)
		ch := sendAsync(c, f, 16<<20)
		wg.Add(2)
		go func() { defer wg.Done(); ended <- <-ch }()
		go func() {
			defer wg.Done()
			buf := make([]byte, chunk)
			for {
				select {
				case <-quit:
					return
				case <-time.After(every):
				}
				if _, err := io.ReadFull(client, buf); err != nil {
					return
				}
			}
		}()
	}
	return ended, func() {
		close(quit)
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}
}

// A trickle reader is cut without turns (TestTrickleAckerIsCut), and with
// a line on the loop too (more bodies than places): neither an ACK of a
// few bytes during its wait nor the few bytes a sendfile at its resumption
// would push count as progress.
func TestBulkTrickleCutWhileOthersWait(t *testing.T) {
	const timeout = time.Second
	for _, n := range []int{4, bulkActive + 16} {
		s := serverWithLoops(t, timeout, true)
		s.bulk = newBulkLoops(1, timeout)
		// A 536 B MSS and an 8 KiB receive buffer, 2 KiB read every 50 ms:
		// 40 KiB per 1 s progress timeout, under minAckProgress.
		f, _ := patterned(t, 16<<20)
		ended, stop := pacedClients(t, s, f, n, 536, 8192, 2<<10, 50*time.Millisecond)
		cut := 0
		deadline := time.After(10 * timeout)
	wait:
		for cut < n {
			select {
			case r := <-ended:
				if !errors.Is(r.err, os.ErrDeadlineExceeded) {
					t.Errorf("%d clients: a trickle body ended with %v", n, r.err)
				}
				cut++
			case <-deadline:
				break wait
			}
		}
		t.Logf("%d trickle clients: %d cut after %v (progress timeout %v; turns given up %d)",
			n, cut, 10*timeout, timeout, s.bulk.yields.Load())
		stop()
		if cut < n {
			t.Errorf("%d trickle clients (40 KiB per progress timeout): only %d cut in %v", n, cut, 10*timeout)
		}
	}
}

// threadCPU is the user+system time of one of this process's threads, in
// clock ticks (fields 14 and 15 of /proc/self/task/TID/stat).
func threadCPU(t *testing.T, tid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.Atoi(fields[11])
	k, _ := strconv.Atoi(fields[12])
	return u + k
}

// With more stalled bodies than places, the loop wakes a few times a
// turn, it does not spin.
func TestBulkLoopIdlesWithALine(t *testing.T) {
	s := serverWithLoops(t, time.Minute, true)
	s.bulk = newBulkLoops(1, time.Minute)
	f, _ := patterned(t, 16<<20)
	stalledBodies(t, s, f, 16<<20, 3*bulkActive)
	waitLoaded(t, s, 3*bulkActive)
	time.Sleep(time.Second)
	tid := runningLoop(s)
	before, y0 := threadCPU(t, tid), s.bulk.yields.Load()
	time.Sleep(3 * time.Second)
	used, y := threadCPU(t, tid)-before, s.bulk.yields.Load()-y0
	t.Logf("loop thread: %d ticks in 3 s, %d turns given up", used, y)
	if used > 30 { // 10 % of a CPU
		t.Errorf("the loop used %d ticks of 300 with nothing to send", used)
	}
}

// Clients that requested a large body and read nothing cost a reader
// nothing: their bodies are parked, not put back in line, so they do not
// hold a place for a whole bulkTurnTime in every round (which gave a
// reader behind 160 of them 1 MiB per round: 8 MiB in 7.9 s).
func TestBulkIdleClientsDoNotSlowReaders(t *testing.T) {
	s := serverWithLoops(t, time.Minute, true)
	s.bulk = newBulkLoops(1, time.Minute)
	f, data := patterned(t, 16<<20)
	const idle = 5 * bulkActive
	stalledBodies(t, s, f, 16<<20, idle)
	waitLoaded(t, s, idle)
	const size = 8 << 20
	c, client := pair(t, s)
	start := time.Now()
	ch := sendAsync(c, f, size)
	got, err := io.ReadAll(io.LimitReader(client, int64(len("HTTP/1.1 200 OK\r\n\r\n"))+size))
	took := time.Since(start)
	r := <-ch
	if err != nil || r.err != nil || !bytes.Equal(got[len(got)-size:], data[:size]) {
		t.Fatalf("the reader's body: %d B read (%v), SendFileAt %v", len(got), err, r.err)
	}
	t.Logf("an 8 MiB body to a reader behind %d clients that read nothing: %v (%d turns given up, %d parked)", idle, took, s.bulk.yields.Load(), s.bulk.parks.Load())
	if took > 2*time.Second {
		t.Errorf("an 8 MiB body to a reader took %v behind %d idle clients", took, idle)
	}
}

// A parked body whose client resets ends at once, with the reset: it
// does not go through the line first, holding its descriptor and its
// image for a whole wait, to fail only at its turn.
func TestBulkResetWhileParkedEndsAtOnce(t *testing.T) {
	s := serverWithLoops(t, time.Minute, true)
	s.bulk = newBulkLoops(1, time.Minute)
	f, _ := patterned(t, 16<<20)
	c, client := tinyPair(t, s, 1460, 64<<10) // reads nothing
	ch := sendAsync(c, f, 16<<20)
	waitLoaded(t, s, 1)
	// Steady readers: 128 KiB receive buffers, 64 KiB read every 20 ms
	// (3.2 MB/s), too slow for a whole turn in bulkTurnTime, so each gives
	// up its place in every round and is back in line a few ms later,
	// which keeps a line of about a fifth of a second on the loop.
	_, stop := pacedClients(t, s, f, 4*bulkActive, 1460, 128<<10, 64<<10, 20*time.Millisecond)
	defer stop()
	waitLoaded(t, s, 1+4*bulkActive)
	// The first body began first, so its turn ran out first once the
	// line formed; its client never reads, so it stays parked.
	for start := time.Now(); s.bulk.parks.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatal("no body parked")
		}
	}
	time.Sleep(time.Second) // the line settles into its rounds
	if err := client.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	reset := time.Now()
	client.Close() // an RST
	r := waitResult(t, ch, 10*time.Second, "the reset body")
	took := time.Since(reset)
	t.Logf("the parked body ended %v after its client's reset, with %v (%d turns given up, %d parked)", took, r.err, s.bulk.yields.Load(), s.bulk.parks.Load())
	if r.err == nil || errors.Is(r.err, os.ErrDeadlineExceeded) {
		t.Errorf("the reset body ended with %v, want the reset", r.err)
	}
	if took > 100*time.Millisecond {
		t.Errorf("the parked body ended %v after its client's reset, want at once", took)
	}
}
