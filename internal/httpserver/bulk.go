package httpserver

import (
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
	// bulkChunk is the most one sendfile call of a loop is asked for, so
	// that one socket with a wide window does not hold the loop from the
	// others.
	bulkChunk = 4 << 20
)

// bulkJob is one body: sock and src stay open while it runs (SendFileAt
// waits for it inside the connection's raw write, which holds the
// descriptor).
type bulkJob struct {
	sock, src int
	off, left int64
	sent      int64
	err       error     // a raw errno, net.ErrClosed (aborted) or os.ErrDeadlineExceeded
	last      time.Time // last progress
	aborted   atomic.Bool
	done      chan struct{}
}

// bulkLoops are a Server's loops; a job goes to the one with the fewest.
type bulkLoops struct {
	timeout time.Duration // no progress for this long ends a job (ProgressTimeout)
	idle    time.Duration // bulkIdle; tests shorten it
	loops   []*bulkLoop
}

func newBulkLoops(n int, timeout time.Duration) *bulkLoops {
	b := &bulkLoops{timeout: timeout, idle: bulkIdle}
	for range max(n, 1) {
		b.loops = append(b.loops, &bulkLoop{b: b, epfd: -1, evfd: -1})
	}
	return b
}

// send runs j on a loop and waits for it to end. It fails (and nothing
// was sent) only when no loop can be started: the caller then sends
// itself.
func (b *bulkLoops) send(j *bulkJob) error {
	l := b.loops[0]
	for _, o := range b.loops[1:] {
		if o.load.Load() < l.load.Load() {
			l = o
		}
	}
	j.done = make(chan struct{})
	if err := l.submit(j); err != nil {
		return err
	}
	<-j.done
	return nil
}

// abort ends j at the loop's next wakeup, with net.ErrClosed.
func (b *bulkLoops) abort(j *bulkJob) {
	j.aborted.Store(true)
	for _, l := range b.loops {
		l.wake()
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
	_ = unix.Setpriority(unix.PRIO_PROCESS, tid, bulkNice) // best effort: without it the loop still sends
	l.tid.Store(int64(tid))
	close(started)

	jobs := map[int]*bulkJob{}
	events := make([]unix.EpollEvent, 256)
	idleSince := time.Now()
	for {
		wait := 1000 // ms: deadlines are checked at least this often
		if len(jobs) == 0 {
			wait = int(max(l.b.idle/time.Millisecond, 1))
		}
		n, err := unix.EpollWait(epfd, events, wait)
		if err != nil && err != unix.EINTR {
			// Cannot happen with a valid epoll fd: fail what runs and
			// what waits, and stop.
			err = os.NewSyscallError("epoll_wait", err)
			for _, j := range jobs {
				l.finish(jobs, j, err)
			}
			l.mu.Lock()
			in := l.incoming
			l.incoming = nil
			l.mu.Unlock()
			for _, j := range in {
				j.err = err
				l.done(j)
			}
			l.stop(jobs)
			return
		}
		now := time.Now()
		for _, ev := range events[:max(n, 0)] {
			fd := int(ev.Fd)
			if fd == evfd {
				var buf [8]byte
				_, _ = unix.Read(evfd, buf[:])
				l.mu.Lock()
				in := l.incoming
				l.incoming = nil
				l.mu.Unlock()
				for _, j := range in {
					j.last = now
					if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, j.sock, &unix.EpollEvent{Events: unix.EPOLLOUT, Fd: int32(j.sock)}); err != nil {
						j.err = err
						l.done(j)
						continue
					}
					jobs[j.sock] = j
					l.send(jobs, j, now)
				}
				continue
			}
			if j := jobs[fd]; j != nil {
				l.send(jobs, j, now)
			}
		}
		for _, j := range jobs {
			switch {
			case j.aborted.Load():
				l.finish(jobs, j, net.ErrClosed)
			case l.b.timeout > 0 && now.Sub(j.last) >= l.b.timeout:
				l.finish(jobs, j, os.ErrDeadlineExceeded)
			}
		}
		if len(jobs) > 0 {
			idleSince = now
		} else if now.Sub(idleSince) >= l.b.idle && l.stop(jobs) {
			return
		}
	}
}

// send sendfiles into j's socket until it takes no more, the body is sent
// or an error ends it.
func (l *bulkLoop) send(jobs map[int]*bulkJob, j *bulkJob, now time.Time) {
	for j.left > 0 {
		n, err := unix.Sendfile(j.sock, j.src, &j.off, int(min(j.left, bulkChunk)))
		if n > 0 {
			j.sent += int64(n)
			j.left -= int64(n)
			j.last = now
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

// finish takes j out of the loop and wakes its connection.
func (l *bulkLoop) finish(jobs map[int]*bulkJob, j *bulkJob, err error) {
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, j.sock, nil)
	delete(jobs, j.sock)
	j.err = err
	l.done(j)
}

func (l *bulkLoop) done(j *bulkJob) {
	l.load.Add(-1)
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
