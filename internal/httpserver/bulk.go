package httpserver

import (
	"errors"
	"maps"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Large bodies (kernels, initrds, whole images: bulkAbove and up) are sent
// by a few event loops on threads of their own, at a lower CPU priority
// (bulkNice), as nginx's workers send: each loop waits for any of its
// sockets to take more and sendfiles into it.
//
// Why not the connection's goroutine: in a boot storm a thousand such
// goroutines each woke for every few hundred kilobytes a socket took, and
// the Go scheduler, its processors busy with them, polled the network only
// every few milliseconds. A TFTP block's ACK or a DHCP request then waited
// behind them: the TFTP server's turnaround under a 1,000-machine storm
// was 11 ms at p50 and 82 ms at p99, in a lock-step protocol that needs a
// round trip per window. Here the kernel work of the bulk streams (the
// sendfile and the network stack under it) runs on threads the kernel
// schedules after the boot path's, and the Go scheduler is left free.

const (
	// bulkAbove is the smallest body sent by a loop: below it a response
	// goes out in a sendfile or two on its own goroutine, cheaper than a
	// hand-over (iPXE's sanboot reads are 512 bytes to a few KiB).
	bulkAbove = 2 << 20
	// bulkNice is the nice value of the loops' threads. An unprivileged
	// process may raise its threads' nice value but never lower it again,
	// so a loop's thread keeps it until the loop ends and the thread with
	// it (a goroutine locked to its thread ends the thread on exit).
	bulkNice = 10
	// bulkIdle is how long a loop with nothing to send keeps its thread:
	// long enough to carry it from one body to the next in a storm, short
	// enough that an idle server keeps no thread for it.
	bulkIdle = 250 * time.Millisecond
	// bulkChunk is the most a loop sends into one socket per wakeup, so
	// that a client that drains as fast as sendfile fills (a fast link,
	// a cold page cache) does not hold the loop from its other sockets:
	// the socket, still writable, comes back at the next epoll_wait.
	bulkChunk = 4 << 20
	// A loop checks its jobs' progress deadlines every quarter of
	// ProgressTimeout, within these bounds, and not at every wakeup.
	bulkSweepMin = 10 * time.Millisecond
	bulkSweepMax = time.Second
)

// Turns. A loop sends to at most bulkActive bodies at once, or to one in
// bulkWaitTurns of those it holds if that is more; the others wait in the
// order they came. While more wait than there are free places, a body
// gives up its place after bulkTurn bytes and goes to the back of the
// line. One whose client took less than that in bulkTurnTime gives up its
// place too (a slow client must not hold a place a fast one could use),
// but is parked: it joins the line only once its socket can take data
// again, so that clients that read nothing do not spend the line's turns
// (each would hold a place for a whole bulkTurnTime in every round). What
// a socket holds still drains meanwhile. The last in line waits about bulkWaitTurns
// turns, 4-5 s, however many bodies there are: under iPXE's 15 s
// sanboot command timeout and ProgressTimeout. Without turns, a thousand sockets were filled at once: in a
// 1,000-machine storm (256 KiB windows) the host's TCP memory peaked at
// 694 MiB, in pressure, with twice the retransmissions, and the storm
// took 59-60 s; with them 124-132 MiB and 47-49 s (BENCHMARKS.md,
// section G, "Turns").
const (
	bulkActive    = 32
	bulkWaitTurns = 16
	bulkTurn      = 1 << 20
	bulkTurnTime  = 250 * time.Millisecond
)

// bulkPlaces is how many of the held bodies a loop sends to at once.
func bulkPlaces(held int) int { return max(bulkActive, held/bulkWaitTurns) }

// Progress across a wait: a body's progress deadline stops while it
// waits for a turn, unless its client could have taken data during the
// wait. At the end of its turn the loop notes whether its socket still
// held data. When the body is begun again, a socket that held nothing
// makes the wait the server's (it is left out); otherwise the wait counts
// like any time without progress, and only what counts as progress
// anywhere else resets the deadline: minAckProgress ACKed since the last
// look (bulkJob.acking), or a send once the socket reports it can take
// data (a resumed body waits for EPOLLOUT, as one that never waited).
// Parked bodies are swept like running ones. So a client that stops
// reading, or trickles, is cut after ProgressTimeout (and a sweep)
// however long the line, as without turns.

// bulkJob is one body: sock and src stay open while it runs (SendFileAt
// waits for it inside the connection's raw write, which holds the
// descriptor).
type bulkJob struct {
	sock, src int
	off, left int64
	sent      int64
	err       error     // a raw errno, net.ErrClosed (aborted) or os.ErrDeadlineExceeded
	last      time.Time // last progress: the socket took data or the client ACKed some
	acked     uint64    // tcpi_bytes_acked at last, when ackWatch (conn.ackedSince)
	ackWatch  bool
	aborted   atomic.Bool
	loop      *bulkLoop // the loop it was given to
	done      chan struct{}
	turnLeft  int64     // bytes left in its turn
	turnEnds  time.Time // when its turn ends if it has not sent turnLeft
	waitFrom  time.Time // when it last gave up its turn (zero: never)
	waitHeld  bool      // whether its socket held data then
}

// acking reports whether j's client ACKed at least minAckProgress since
// the last look, and if so counts that as progress at now. A client still
// ACKing is slow, not stalled (conn.ackedSince).
func (j *bulkJob) acking(info *tcpInfo, now time.Time) bool {
	if !j.ackWatch {
		return false
	}
	a := info.acked(j.sock)
	if a < j.acked+minAckProgress {
		return false
	}
	j.acked, j.last = a, now
	return true
}

// stalled reports whether j has gone timeout without progress; a client
// still ACKing gets its deadline moved instead.
func (j *bulkJob) stalled(info *tcpInfo, timeout time.Duration, now time.Time) bool {
	return timeout > 0 && now.Sub(j.last) >= timeout && !j.acking(info, now)
}

// errNoLoop ends a job a loop could not take on or back (its socket
// could not be watched); the connection sends the rest of the body itself,
// from j.off.
var errNoLoop = errors.New("httpserver: no bulk loop for this socket")

// bulkLoops are a Server's loops; a job goes to the one with the fewest.
type bulkLoops struct {
	timeout time.Duration // no progress for this long ends a job (ProgressTimeout)
	sweep   time.Duration // deadlines are checked at least this often
	idle    time.Duration // bulkIdle; tests shorten it
	loops   []*bulkLoop
	served  atomic.Int64 // jobs a loop ended, for tests
	yields  atomic.Int64 // turns given up while others waited, for tests
	parks   atomic.Int64 // of those, the slow ones parked until writable, for tests
	peak    atomic.Int64 // the most bodies a loop sent to at once, for tests
}

func newBulkLoops(n int, timeout time.Duration) *bulkLoops {
	b := &bulkLoops{timeout: timeout, idle: bulkIdle, sweep: bulkSweepMax}
	if timeout > 0 {
		b.sweep = min(max(timeout/4, bulkSweepMin), bulkSweepMax)
	}
	for range max(n, 1) {
		b.loops = append(b.loops, &bulkLoop{b: b, epfd: -1, evfd: -1})
	}
	return b
}

// pick is the loop with the fewest jobs.
func (b *bulkLoops) pick() *bulkLoop {
	l := b.loops[0]
	for _, o := range b.loops[1:] {
		if o.load.Load() < l.load.Load() {
			l = o
		}
	}
	return l
}

// send runs j on j.loop (pick's) and waits for it to end. It fails (and
// nothing was sent) only when the loop cannot be started: the caller then
// sends itself.
func (b *bulkLoops) send(j *bulkJob) error {
	j.done = make(chan struct{})
	if err := j.loop.submit(j); err != nil {
		return err
	}
	<-j.done
	return nil
}

// abort ends j at its loop's next wakeup, with net.ErrClosed.
func (b *bulkLoops) abort(j *bulkJob) {
	j.aborted.Store(true)
	if j.loop != nil {
		j.loop.wake()
	}
}

// bulkLoop is one event loop: an epoll set of the sockets it sends to, and
// an eventfd that brings it new jobs and aborts.
type bulkLoop struct {
	b    *bulkLoops
	load atomic.Int64 // jobs submitted and not finished

	mu       sync.Mutex
	running  bool
	epfd     int
	evfd     int
	incoming []*bulkJob
	tid      atomic.Int64 // the loop's thread while it runs, for tests
}

// submit hands j to the loop, starting the loop when it is not running.
func (l *bulkLoop) submit(j *bulkJob) error {
	l.mu.Lock()
	if !l.running {
		if err := l.open(); err != nil {
			l.mu.Unlock()
			return err
		}
		l.running = true
		started := make(chan struct{})
		go l.run(l.epfd, l.evfd, started)
		<-started
	}
	l.incoming = append(l.incoming, j)
	l.load.Add(1)
	l.mu.Unlock()
	l.wake()
	return nil
}

// open makes the epoll set and the eventfd; l.mu is held.
func (l *bulkLoop) open() error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("epoll_create1", err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return os.NewSyscallError("eventfd", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd)}); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return os.NewSyscallError("epoll_ctl", err)
	}
	l.epfd, l.evfd = epfd, evfd
	return nil
}

func (l *bulkLoop) wake() {
	l.mu.Lock()
	fd := l.evfd
	if fd >= 0 {
		var one = [8]byte{1}
		_, _ = unix.Write(fd, one[:])
	}
	l.mu.Unlock()
}

// run is the loop. Its goroutine stays on its thread, which it lowers to
// bulkNice; returning with the thread still locked ends the thread, so
// the lowered priority never reaches the runtime's other goroutines.
// It must not take l.mu before started is closed: submit holds it until
// then.
//
// The thread must not be the process's main thread, which the runtime
// never ends (a goroutine that exits locked to it wedges it) and which
// would keep the lowered priority. A loop that finds itself there starts
// again on a new goroutine while it holds the main thread, so that the new
// one runs elsewhere, and lets go once the new one holds its own.
func (l *bulkLoop) run(epfd, evfd int, started chan<- struct{}) {
	runtime.LockOSThread()
	tid := unix.Gettid()
	if tid == unix.Getpid() {
		moved := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(moved)
			l.run(epfd, evfd, started)
		}()
		<-moved
		runtime.UnlockOSThread()
		return
	}
	// Lower, never raise: a process already above bulkNice keeps its
	// value (the kernel's getpriority value is 20 - nice). Best effort:
	// without it the loop still sends.
	if p, err := unix.Getpriority(unix.PRIO_PROCESS, tid); err == nil && 20-p < bulkNice {
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, bulkNice)
	}
	l.tid.Store(int64(tid))
	close(started)

	var (
		jobs   = map[int]*bulkJob{} // the bodies taking their turn, by socket
		queue  []*bulkJob           // the bodies waiting for a turn, in order
		parked = map[int]*bulkJob{} // slow bodies waiting to be writable, by socket
		info   tcpInfo
	)
	// begin gives j a turn: its socket joins the epoll set.
	begin := func(j *bulkJob, now time.Time) {
		first := j.waitFrom.IsZero()
		switch {
		case first:
			j.last = now
		case !j.waitHeld:
			j.last = j.last.Add(now.Sub(j.waitFrom)) // nothing to take: the wait was the server's
		case j.stalled(&info, l.b.timeout, now): // its client took nothing it could have
			j.err = os.ErrDeadlineExceeded
			l.done(j)
			return
		}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, j.sock, &unix.EpollEvent{Events: unix.EPOLLOUT, Fd: int32(j.sock)}); err != nil {
			j.err = errNoLoop // the connection goes on from j.off itself
			l.done(j)
			return
		}
		j.turnLeft, j.turnEnds = bulkTurn, now.Add(bulkTurnTime)
		jobs[j.sock] = j
		if n := int64(len(jobs)); n > l.b.peak.Load() {
			l.b.peak.Store(n)
		}
		if first {
			l.send(jobs, j)
		} // a resumed body sends at its EPOLLOUT, so a trickle cannot pass for progress
	}
	// yield ends j's turn. After a whole turn's bytes it goes to the back
	// of the line; a slow one (park) stays in the epoll set without a
	// place, and its EPOLLOUT puts it in line.
	yield := func(j *bulkJob, now time.Time, park bool) {
		delete(jobs, j.sock)
		held, err := unix.IoctlGetInt(j.sock, unix.SIOCOUTQ) // unsent and unacked
		j.waitFrom, j.waitHeld = now, err != nil || held > 0
		l.b.yields.Add(1)
		if park {
			parked[j.sock] = j
			l.b.parks.Add(1)
			return
		}
		_ = unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, j.sock, nil)
		queue = append(queue, j)
	}
	places := func() int { return bulkPlaces(len(jobs) + len(queue)) }
	events := make([]unix.EpollEvent, 256)
	idleSince, lastSweep, lastTurns := time.Now(), time.Now(), time.Now()
	for {
		wait := max(l.b.sweep-time.Since(lastSweep), time.Millisecond)
		switch {
		case len(queue) > 0:
			wait = min(wait, max(bulkTurnTime/4-time.Since(lastTurns), time.Millisecond))
		case len(jobs) == 0 && len(parked) == 0:
			wait = max(l.b.idle-time.Since(idleSince), time.Millisecond)
		}
		n, err := unix.EpollWait(epfd, events, int(max(wait/time.Millisecond, 1)))
		if err != nil && err != unix.EINTR {
			// Cannot happen with a valid epoll fd: fail what runs and
			// what waits, and stop.
			for _, j := range queue {
				j.err = os.NewSyscallError("epoll_wait", err)
				l.done(j)
			}
			maps.Copy(jobs, parked)
			l.fail(jobs, os.NewSyscallError("epoll_wait", err))
			return
		}
		woken, busy := false, len(jobs) > 0
		for _, ev := range events[:max(n, 0)] {
			fd := int(ev.Fd)
			if fd == evfd {
				woken = true
				var buf [8]byte
				_, _ = unix.Read(evfd, buf[:])
				for _, j := range l.take() {
					busy = true
					if j.aborted.Load() {
						j.err = net.ErrClosed
						l.done(j)
						continue
					}
					queue = append(queue, j)
				}
				continue
			}
			if j := parked[fd]; j != nil {
				delete(parked, fd)
				if ev.Events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
					// The client reset or went: end it now, not after a
					// wait in line holding its descriptor and its image.
					l.finish(jobs, j, sockError(fd))
					continue
				}
				// Writable again: into the line.
				_ = unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, fd, nil)
				queue = append(queue, j)
				continue
			}
			j := jobs[fd]
			if j == nil {
				continue
			}
			l.send(jobs, j)
			if jobs[fd] == j && j.turnLeft <= 0 {
				if len(queue) > places()-len(jobs) {
					yield(j, time.Now(), false)
				} else { // no body waits for this place: another turn at once
					j.turnLeft, j.turnEnds = bulkTurn, time.Now().Add(bulkTurnTime)
					l.send(jobs, j)
				}
			}
		}
		now := time.Now()
		// A turn that outlasts bulkTurnTime ends only when more wait than
		// there are free places; looked at four times a turn, not at every
		// wakeup.
		if need := len(queue) - (places() - len(jobs)); need > 0 && now.Sub(lastTurns) >= bulkTurnTime/4 {
			lastTurns = now
			for _, j := range jobs {
				if need > 0 && now.After(j.turnEnds) {
					yield(j, now, true)
					need--
				}
			}
		}
		// Aborts come with a wakeup; deadlines need a look only every
		// sweep, not at every socket's turn. A body in line has none
		// until its turn (begin), when its client could not take data;
		// a parked one has, its client could. The sweep goes first, so
		// that the places it frees are taken in this pass.
		if woken || now.Sub(lastSweep) >= l.b.sweep {
			lastSweep = now
			waiting := queue[:0]
			for _, j := range queue {
				if j.aborted.Load() {
					j.err = net.ErrClosed
					l.done(j)
					continue
				}
				waiting = append(waiting, j)
			}
			clear(queue[len(waiting):])
			queue = waiting
			for fd, j := range parked {
				switch {
				case j.aborted.Load():
					delete(parked, fd)
					l.finish(jobs, j, net.ErrClosed)
				case j.stalled(&info, l.b.timeout, now):
					delete(parked, fd)
					l.finish(jobs, j, os.ErrDeadlineExceeded)
				}
			}
			for _, j := range jobs {
				switch {
				case j.aborted.Load():
					l.finish(jobs, j, net.ErrClosed)
				case j.stalled(&info, l.b.timeout, now):
					l.finish(jobs, j, os.ErrDeadlineExceeded)
				}
			}
		}
		for len(jobs) < places() && len(queue) > 0 {
			j := queue[0]
			queue[0] = nil
			queue = queue[1:]
			if j.aborted.Load() {
				j.err = net.ErrClosed
				l.done(j)
				continue
			}
			begin(j, now)
		}
		if len(queue) == 0 {
			queue = nil // let the array go
		}
		if busy || len(jobs) > 0 || len(queue) > 0 || len(parked) > 0 {
			idleSince = now // idle from the last pass that had a body
		} else if now.Sub(idleSince) >= l.b.idle && l.stop(jobs) {
			return
		}
	}
}

// take empties the loop's incoming jobs.
func (l *bulkLoop) take() []*bulkJob {
	l.mu.Lock()
	defer l.mu.Unlock()
	in := l.incoming
	l.incoming = nil
	return in
}

// fail ends every job with err and stops the loop, failing too what comes
// in until it has stopped.
func (l *bulkLoop) fail(jobs map[int]*bulkJob, err error) {
	for _, j := range jobs {
		l.finish(jobs, j, err)
	}
	for {
		for _, j := range l.take() {
			j.err = err
			l.done(j)
		}
		if l.stop(jobs) {
			return
		}
	}
}

// send sendfiles into j's socket until it takes no more, bulkChunk went
// in, j's turn is over, the body is sent or an error ends it.
func (l *bulkLoop) send(jobs map[int]*bulkJob, j *bulkJob) {
	budget := int64(bulkChunk)
	for j.left > 0 {
		if budget <= 0 || j.turnLeft <= 0 {
			return // still writable: epoll_wait reports it again, or the turn ends
		}
		n, err := unix.Sendfile(j.sock, j.src, &j.off, int(min(j.left, budget, max(j.turnLeft, 1))))
		if n > 0 {
			j.sent += int64(n)
			j.left -= int64(n)
			budget -= int64(n)
			j.turnLeft -= int64(n)
			j.last = time.Now()
		}
		switch {
		case err == unix.EAGAIN:
			return
		case err == unix.EINTR:
		case err != nil:
			l.finish(jobs, j, err) // SendFileAt names the call
			return
		case n == 0: // the file ended
			l.finish(jobs, j, nil)
			return
		}
	}
	l.finish(jobs, j, nil)
}

// sockError is the error pending on a socket epoll reported in error or
// hung up, as the next send would have met it (EPIPE when none is).
func sockError(fd int) error {
	if e, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && e != 0 {
		return unix.Errno(e)
	}
	return unix.EPIPE
}

// finish takes j out of the loop and wakes its connection.
func (l *bulkLoop) finish(jobs map[int]*bulkJob, j *bulkJob, err error) {
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, j.sock, nil)
	delete(jobs, j.sock)
	j.err = err
	l.done(j)
}

func (l *bulkLoop) done(j *bulkJob) {
	l.load.Add(-1)
	l.b.served.Add(1)
	close(j.done)
}

// stop closes the loop's descriptors unless a job came in meanwhile; it
// reports whether the loop stopped.
func (l *bulkLoop) stop(jobs map[int]*bulkJob) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.incoming) > 0 || len(jobs) > 0 {
		return false
	}
	unix.Close(l.epfd)
	unix.Close(l.evfd)
	l.epfd, l.evfd, l.running = -1, -1, false
	l.tid.Store(0)
	return true
}
