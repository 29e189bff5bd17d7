package httpserver

import (
	"errors"
	"io"
	"math"
	"math/bits"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// writeChunk is the most one Write sends under one deadline: a large
	// write to a slow client moves the deadline at least this often.
	writeChunk = 64 << 10
	// maxSendfile is the most one sendfile call is asked for.
	maxSendfile = 1 << 30
)

// conn is an accepted connection under the server's limits: it counts in
// the cap until it is closed, and every write it makes, sendfile
// included, must make progress within ProgressTimeout. Its write deadline
// is its own; a caller's SetWriteDeadline lasts until the next write.
type conn struct {
	net.Conn
	s        *Server
	src      netip.Addr // the client's address, counted in s.bySource until Close
	closed   atomic.Bool
	deadline atomic.Int64    // the write deadline last set, in ns since s.base
	raw      syscall.RawConn // nil when the connection has no descriptor

	// One ReadFrom at a time: the state of its sendfile, which sendStep,
	// made once, reads, so that a response allocates nothing for it.
	sf struct {
		src        int
		at         bool  // read the file at off, not at its own offset
		raw        bool  // with at: the range is in memory, sendfile is raw (SendResidentAt)
		off        int64 // with at: where the next sendfile reads
		left, sent int64
		err        error
		noBulk     bool // no bulk loop took the body: send it here
	}
	step func(fd uintptr) bool

	// The head SendFileAt sends with MSG_MORE, and moreStep, made once.
	more     []byte
	moreErr  syscall.Errno
	moreStep func(fd uintptr) bool
	cork     func(fd uintptr) // TCP_CORK on, made once
	uncork   func(fd uintptr) // TCP_CORK off, made once

	// The bulk job SendFileAt waits for (Close aborts it), and bulkStep,
	// made once, which runs it inside the socket's raw write.
	job      atomic.Pointer[bulkJob]
	bulkStep func(fd uintptr) bool

	// One Read at a time (rmu): its buffer and result, for readStep,
	// made once, which reads with a raw call (rawcalls.go).
	rmu      sync.Mutex
	rd       []byte
	rdN      int
	rdErr    syscall.Errno
	readStep func(fd uintptr) bool

	// One Write at a time (wmu): what is left of it, for writeStep, made
	// once.
	wmu       sync.Mutex
	wr        []byte
	wrErr     syscall.Errno
	writeStep func(fd uintptr) bool

	// The TCP_NOTSENT_LOWAT in force (0: none set), and the one bound
	// wants, which setLowat, made once, sets.
	lowat, wantLowat int
	setLowat         func(fd uintptr)

	// What the client had ACKed (tcpi_bytes_acked) when a large body
	// began or its progress deadline last passed: a deadline that passes
	// while the client is still ACKing is moved on (ackedSince). info
	// and readAcked, made once, read it without allocating.
	acked, ackedNow uint64
	ackWatch        bool // startBody noted acked for this body
	info            tcpInfo
	readAcked       func(fd uintptr)
}

// corkAbove is the body length from which SendFileAt corks the socket for
// the whole response: with TCP_NODELAY each sendfile a socket wakes for
// sends what little room it has at once, so a client among hundreds gets a
// run of small segments; corked, the kernel sends only full ones (nginx's
// tcp_nopush) and the uncork at the end pushes the tail. Below it the head
// goes with MSG_MORE and the body in one sendfile: no setsockopt.
const corkAbove = 64 << 10

func newConn(c net.Conn, s *Server, src netip.Addr) *conn {
	pc := &conn{Conn: c, s: s, src: src}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			pc.raw = raw
		}
	}
	pc.step = pc.sendStep
	pc.moreStep = pc.sendMore
	pc.cork = func(fd uintptr) { _ = rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_CORK, 1) }
	pc.uncork = func(fd uintptr) { _ = rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_CORK, 0) }
	pc.bulkStep = pc.sendBulk
	pc.setLowat = func(fd uintptr) {
		pc.acked = pc.info.acked(int(fd))
		pc.wantLowat = lowatUnder(pc.wantLowat, pc.info.sndWnd())
		if pc.wantLowat != pc.lowat && rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, pc.wantLowat) == nil {
			pc.lowat = pc.wantLowat
		}
	}
	pc.readAcked = func(fd uintptr) { pc.ackedNow = pc.info.acked(int(fd)) }
	pc.readStep = pc.recvStep
	pc.writeStep = func(fd uintptr) bool { return pc.sendAll(fd, &pc.wr, 0, &pc.wrErr) }
	return pc
}

// tcpInfo reads a socket's tcp_info into a buffer of its own: acked
// reads it, sndWnd reports the window that read saw.
type tcpInfo struct {
	buf unix.TCPInfo
	n   uint32
}

// acked is what the peer has ACKed on fd; 0 where the kernel does not say
// (not TCP, or a kernel before 4.1): nothing then counts as progress but
// what the socket takes.
func (t *tcpInfo) acked(fd int) uint64 {
	t.n = uint32(unsafe.Sizeof(t.buf))
	_, e := call6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(&t.buf)), uintptr(unsafe.Pointer(&t.n)), 0)
	if e != 0 {
		t.n = 0 // sndWnd must not report an earlier read's window
		return 0
	}
	if uintptr(t.n) < unsafe.Offsetof(t.buf.Bytes_acked)+unsafe.Sizeof(t.buf.Bytes_acked) {
		return 0
	}
	return t.buf.Bytes_acked
}

// sndWnd is the receive window the peer advertised, as the last acked
// read it; 0 where the kernel does not say (an older kernel, whose
// tcp_info ends before it) or the read failed: lowatUnder then leaves the
// share alone.
func (t *tcpInfo) sndWnd() uint32 {
	if uintptr(t.n) < unsafe.Offsetof(t.buf.Snd_wnd)+unsafe.Sizeof(t.buf.Snd_wnd) {
		return 0
	}
	return t.buf.Snd_wnd
}

// lowatUnder is share, capped for a client whose receive window (wnd) is
// between minLowat and fixedWindow when a body begins: at half the window,
// rounded down to a power of two, and never under minLowat (so a window of
// 128 to 256 KiB gets 128 KiB); never more than share.
//
// Unsent data the window cannot take waits in the socket. iPXE's window is
// a fixed 256 KiB, so in a boot storm of 500 machines a 512 KiB share held
// twice what one window lets out, in each socket. With 128 KiB per socket
// such storms finished sooner in 12 of 16 A/B pairs, median 0.955, less
// than this VM's spread from one round to the next, and with less TCP
// memory (BENCHMARKS.md, "Where the CPU goes, and half a small window").
// Outside that range the share stands: a window of 0 or one the kernel
// does not report; a tiny window (a client that slow would otherwise have
// to drain 64 KiB per progress timeout, where its whole body used to fit
// the share); a window grown past fixedWindow. A Linux client opens at
// 64 KiB, so its first body keeps the share; a later one may be capped
// while its window grows (autotuned storms measured no different).
func lowatUnder(share int, wnd uint32) int {
	if wnd < minLowat || wnd >= fixedWindow || int(wnd/2) >= share {
		return share
	}
	return min(share, max(1<<(bits.Len32(wnd/2)-1), minLowat))
}

// fixedWindow is the receive window from which lowatUnder leaves a
// connection's unsent share alone.
const fixedWindow = 1 << 20

// startBody readies the socket for a body of n bytes, in one raw Control
// call: it notes what the client has ACKed so far, for ackedSince, and it
// caps the data the socket may hold unsent: the server's unsent budget
// shared among its open connections (Server.lowatFor), and no more than
// half a small receive window (lowatUnder). Without a cap the
// kernel lets each socket queue up to its autotuned send buffer (4 MiB by
// default) while the peer's window lets out a little at a time; in a boot
// storm a thousand kernel and initrd downloads queued megabytes each, the
// host's TCP memory reached its pressure threshold, and the kernel began
// to drop packets and collapse queues. Small bodies need neither (they
// fit in any socket's buffer), and a setsockopt is spent only when the
// share changes.
func (c *conn) startBody(n int64) {
	c.ackWatch = n > corkAbove && c.raw != nil
	if !c.ackWatch {
		return
	}
	c.wantLowat = c.s.lowatFor()
	_ = c.raw.Control(c.setLowat)
}

// ackedSince reports whether the client ACKed at least minAckProgress
// since the body began or this last said so, after a write's progress deadline passed, and
// then moves the deadline on. The deadline marks how long the socket took
// no more data; a socket holds up to half its unsent budget more before
// it takes any (TCP_NOTSENT_LOWAT wakes a writer only below half the
// mark), so a client reading slower than that drains, tens of KB/s with a
// 4 MiB budget and a 30 s timeout, would be cut while it reads. Its ACKs
// show it is not stalled; a client that stops reading stops ACKing once
// its window closes, and is cut within two timeouts of its last read (at
// the first its window may still have been filling). A deadline a caller set
// (not the progress deadline) is never moved.
func (c *conn) ackedSince(err error) bool {
	if !c.ackWatch || !errors.Is(err, os.ErrDeadlineExceeded) || c.deadline.Load() == 0 {
		return false
	}
	if c.raw.Control(c.readAcked) != nil || c.ackedNow < c.acked+minAckProgress {
		return false
	}
	c.acked = c.ackedNow
	c.progress()
	return true
}

// minAckProgress is the least a client must ACK between two looks for
// its ACKs to count as progress: half the smallest unsent share, what the
// socket itself shows of a client on a busy server. It rescues a reader
// that a large share hides (up to 2 MiB per look at 4 MiB) and gives
// nothing to one that trickles a segment per timeout, which would
// otherwise hold a body, its file and an evicting image for as long as
// the body lasts.
const minAckProgress = minLowat / 2

// rawWrite runs step in the socket's raw write, as long as the client
// makes progress (ackedSince).
func (c *conn) rawWrite(step func(fd uintptr) bool) error {
	for {
		err := c.raw.Write(step)
		if !c.ackedSince(err) {
			return err
		}
	}
}

// Close closes the connection and frees its place under the cap. A body
// a bulk loop is sending for it ends first (the descriptor closes once
// SendFileAt has let go of it).
func (c *conn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.s.open.Add(-1)
		c.s.releaseSource(c.src)
	}
	if j := c.job.Load(); j != nil {
		c.s.bulk.abort(j)
	}
	return c.Conn.Close()
}

// CloseWrite half-closes the connection when it can (net/http's lingering
// close uses it).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// SetWriteDeadline sets the write deadline until the next write, which
// sets its own: the deadline progress remembers is forgotten, or its skip
// would keep the caller's (a cleared one included) for a whole response.
func (c *conn) SetWriteDeadline(t time.Time) error {
	c.deadline.Store(0) // never skipped: want is at least ProgressTimeout
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline is SetReadDeadline and SetWriteDeadline in one.
func (c *conn) SetDeadline(t time.Time) error {
	c.deadline.Store(0) // never skipped: want is at least ProgressTimeout
	return c.Conn.SetDeadline(t)
}

// progress moves the write deadline to ProgressTimeout from now. It skips
// the update while the deadline set last is within a sixteenth of that,
// so a run of small writes costs a clock read each, not a timer update.
func (c *conn) progress() {
	now := time.Now()
	timeout := c.s.cfg.ProgressTimeout
	want := int64(now.Sub(c.s.base) + timeout)
	if want-c.deadline.Load() < int64(timeout/16) {
		return
	}
	c.deadline.Store(want)
	_ = c.Conn.SetWriteDeadline(now.Add(timeout))
}

// Write writes p in chunks, each under a fresh progress deadline, with
// raw send calls (rawcalls.go).
func (c *conn) Write(p []byte) (int, error) {
	if c.raw != nil {
		return c.rawWriteAll(p)
	}
	n := 0
	for len(p) > 0 {
		c.progress()
		m, err := c.Conn.Write(p[:min(len(p), writeChunk)])
		n += m
		p = p[m:]
		if err != nil {
			return n, c.stalledIf(err)
		}
	}
	return n, nil
}

// ReadFrom sends a file (an *os.File, or an *io.LimitedReader over one,
// as io.CopyN from a file hands it) with sendfile, moving the progress
// deadline after every chunk the kernel takes; anything else goes
// through Write.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	lr, _ := r.(*io.LimitedReader)
	src, limit := r, int64(math.MaxInt64)
	if lr != nil {
		src, limit = lr.R, lr.N
	}
	var sent int64
	if f, ok := src.(*os.File); ok && c.raw != nil {
		n, err, handled := c.sendfile(f, limit)
		sent = n
		if lr != nil {
			lr.N -= n
		}
		if handled {
			return sent, err
		}
	}
	n, err := io.Copy(writerOnly{c}, r)
	return sent + n, err
}

// writerOnly hides conn's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

// sendfile sends up to limit bytes of f from its offset. handled is false
// when the kernel cannot sendfile from f and nothing was sent: the caller
// copies instead.
func (c *conn) sendfile(f *os.File, limit int64) (int64, error, bool) {
	if limit <= 0 {
		return 0, nil, true
	}
	c.startBody(limit)
	c.sf.src, c.sf.at, c.sf.raw, c.sf.left, c.sf.sent, c.sf.err = int(f.Fd()), false, false, limit, 0, nil
	c.progress()
	err := c.rawWrite(c.step)
	runtime.KeepAlive(f)
	sent, serr := c.sf.sent, c.sf.err
	switch {
	case err != nil:
		return sent, c.stalledIf(err), true
	case sent == 0 && (errors.Is(serr, unix.EINVAL) || errors.Is(serr, unix.ENOSYS) || errors.Is(serr, unix.EOPNOTSUPP)):
		return 0, nil, false
	case serr != nil:
		return sent, os.NewSyscallError("sendfile", serr), true
	}
	return sent, nil, true
}

// sendStep is the body of the sendfile loop, run by RawWrite with the
// socket's descriptor: false waits for the socket to take more, under the
// write deadline; true ends the loop.
func (c *conn) sendStep(fd uintptr) bool {
	var off *int64
	if c.sf.at {
		off = &c.sf.off
	}
	for c.sf.left > 0 {
		var n int
		var err error
		if c.sf.raw {
			var e syscall.Errno
			if n, e = rawSendfile(fd, c.sf.src, off, int(min(c.sf.left, maxSendfile))); e != 0 {
				err = e
			}
		} else {
			n, err = unix.Sendfile(int(fd), c.sf.src, off, int(min(c.sf.left, maxSendfile)))
		}
		if n > 0 {
			c.sf.sent += int64(n)
			c.sf.left -= int64(n)
			c.progress()
		}
		switch {
		case err == unix.EAGAIN:
			return false
		case err == unix.EINTR:
		case err != nil:
			c.sf.err = err
			return true
		case n == 0: // the file ended
			return true
		}
	}
	return true
}

// SendResidentAt is SendFileAt for a range the caller knows is in memory:
// every page of f's bytes [off, off+n) resident and read (mincore). Its
// sendfile is then a raw call (rawcalls.go); a range of bulkAbove and up
// goes to a bulk loop as SendFileAt's does.
func (c *conn) SendResidentAt(head []byte, f *os.File, off, n int64) (int64, error) {
	return c.sendFileAt(head, f, off, n, true)
}

// SendFileAt sends head and then n bytes of f from off: a response head
// and its body. The head goes with MSG_MORE, so the kernel sends it in one
// segment with the body's first bytes (what nginx's tcp_nopush does, here
// without the two setsockopt calls): a small range costs the client one
// segment, not two. sendfile reads f at off itself, so f's own offset is
// neither used nor moved (no lseek). It returns the body bytes sent;
// without a descriptor, or where sendfile refuses f, it writes and copies.
func (c *conn) SendFileAt(head []byte, f *os.File, off, n int64) (int64, error) {
	return c.sendFileAt(head, f, off, n, false)
}

// sendFileAt is SendFileAt, with a raw sendfile when resident.
func (c *conn) sendFileAt(head []byte, f *os.File, off, n int64, resident bool) (int64, error) {
	if c.raw == nil || n <= 0 {
		return c.writeThenCopy(head, f, off, n)
	}
	c.startBody(n)
	if n > corkAbove {
		_ = c.raw.Control(c.cork)
		defer c.raw.Control(c.uncork)
	}
	c.more, c.moreErr = head, 0
	c.progress()
	err := c.rawWrite(c.moreStep) // a head behind a slow reader's unsent data waits as a body does
	c.more = nil
	switch {
	case err != nil:
		return 0, c.stalledIf(err)
	case c.moreErr != 0:
		return 0, os.NewSyscallError("send", c.moreErr)
	}
	c.sf.src, c.sf.at, c.sf.off, c.sf.left, c.sf.sent, c.sf.err = int(f.Fd()), true, off, n, 0, nil
	c.sf.noBulk = false
	c.sf.raw = resident && n < bulkAbove && rawCalls.Load()
	step := c.step
	if n >= bulkAbove && c.s.bulk != nil {
		step = c.bulkStep
	}
	err = c.rawWrite(step)
	runtime.KeepAlive(f)
	sent, serr := c.sf.sent, c.sf.err
	switch {
	case err != nil:
		return sent, c.stalledIf(err)
	case sent == 0 && (errors.Is(serr, unix.EINVAL) || errors.Is(serr, unix.ENOSYS) || errors.Is(serr, unix.EOPNOTSUPP)):
		// The head is queued with MSG_MORE; the copy's writes follow it.
		m, err := io.Copy(writerOnly{c}, io.NewSectionReader(f, off, n))
		return m, shortIf(m, n, err)
	case serr != nil:
		return sent, os.NewSyscallError("sendfile", serr)
	}
	return sent, shortIf(sent, n, nil)
}

// sendBulk runs the body c.sf describes on a bulk loop and waits for it,
// inside the socket's raw write: the descriptor stays open and its own
// until the loop is done with it. A loop that cannot start or watch the
// socket leaves the body to sendStep, on this goroutine.
//
// Only Close interrupts a body on a loop: a write deadline set meanwhile
// from another goroutine does not (the progress timeout still holds).
func (c *conn) sendBulk(fd uintptr) bool {
	if c.sf.noBulk {
		return c.sendStep(fd)
	}
	j := &bulkJob{sock: int(fd), src: c.sf.src, off: c.sf.off, left: c.sf.left, loop: c.s.bulk.pick(),
		acked: c.acked, ackWatch: c.ackWatch}
	c.job.Store(j)
	if c.closed.Load() { // Close ran before the job was there to abort
		c.job.Store(nil)
		c.sf.err = net.ErrClosed
		return true
	}
	err := c.s.bulk.send(j)
	c.job.Store(nil)
	// A loop that could not go on with the body (errNoLoop) may have sent
	// some of it already: the connection goes on from where it stopped.
	c.sf.off, c.sf.left, c.sf.sent, c.acked = j.off, j.left, c.sf.sent+j.sent, j.acked
	if j.sent > 0 {
		c.progress()
	}
	if err != nil || errors.Is(j.err, errNoLoop) {
		c.sf.noBulk = true
		return c.sendStep(fd)
	}
	if j.err != nil {
		c.sf.err = c.stalledIf(j.err)
	}
	return true
}

// shortIf is err, or io.ErrUnexpectedEOF when the file ended before the n
// bytes the head promised: the caller must then drop the connection, not
// keep it alive after a body shorter than its Content-Length.
func shortIf(sent, n int64, err error) error {
	if err == nil && sent < n {
		return io.ErrUnexpectedEOF
	}
	return err
}

// writeThenCopy is SendFileAt without a descriptor.
func (c *conn) writeThenCopy(head []byte, f *os.File, off, n int64) (int64, error) {
	if _, err := c.Write(head); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, nil
	}
	m, err := io.Copy(writerOnly{c}, io.NewSectionReader(f, off, n))
	return m, shortIf(m, n, err)
}

// sendMore is the body of SendFileAt's head loop, as sendStep is of the
// sendfile loop.
func (c *conn) sendMore(fd uintptr) bool {
	return c.sendAll(fd, &c.more, unix.MSG_MORE, &c.moreErr)
}

// sendAll sends *p on the socket fd with flags, a chunk of at most
// writeChunk at a time, moving the progress deadline with every chunk the
// socket takes: true once all is sent or on an error, kept in *errp;
// false when the socket is full (RawConn.Write waits, under the deadline).
func (c *conn) sendAll(fd uintptr, p *[]byte, flags int, errp *syscall.Errno) bool {
	for len(*p) > 0 {
		n, e := rawSend(fd, (*p)[:min(len(*p), writeChunk)], flags|unix.MSG_NOSIGNAL)
		if n > 0 {
			*p = (*p)[n:]
			c.progress()
		}
		switch e {
		case 0:
		case unix.EAGAIN:
			return false
		case unix.EINTR:
		default:
			*errp = e
			return true
		}
	}
	return true
}

// rawWriteAll is Write on a socket.
func (c *conn) rawWriteAll(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wr, c.wrErr = p, 0
	c.progress()
	err := c.raw.Write(c.writeStep)
	n := len(p) - len(c.wr)
	e := c.wrErr
	c.wr = nil
	switch {
	case err != nil:
		err = unwrapOp(err)
	case e != 0:
		err = os.NewSyscallError("write", e)
	default:
		return n, nil
	}
	return n, c.stalledIf(&net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err})
}

// Read reads from the socket with a raw read (rawcalls.go), waiting in
// the network poller under the read deadline as net.TCPConn's Read does.
func (c *conn) Read(p []byte) (int, error) {
	if c.raw == nil || len(p) == 0 {
		return c.Conn.Read(p)
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rd, c.rdN, c.rdErr = p, 0, 0
	err := c.raw.Read(c.readStep)
	n, e := c.rdN, c.rdErr
	c.rd = nil
	switch {
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: unwrapOp(err)}
	case e != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", e)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// recvStep is Read's body, run by the socket's raw read: false waits for
// the socket to have data.
func (c *conn) recvStep(fd uintptr) bool {
	for {
		n, e := rawRecv(fd, c.rd)
		switch e {
		case 0:
			c.rdN = n
			return true
		case unix.EAGAIN:
			return false
		case unix.EINTR:
		default:
			c.rdErr = e
			return true
		}
	}
}

// unwrapOp is the cause inside a RawConn's *net.OpError ("raw-read"), so
// that Read's own OpError names the read, as net.TCPConn's does.
func unwrapOp(err error) error {
	if op, ok := err.(*net.OpError); ok {
		return op.Err
	}
	return err
}

// stalledIf counts err when it is the progress deadline's.
func (c *conn) stalledIf(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.s.stalled.Inc()
		c.s.log.Debug("http: response aborted: no progress", "remote", c.RemoteAddr().String(),
			"progress_timeout", c.s.cfg.ProgressTimeout)
	}
	return err
}
