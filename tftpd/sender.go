package tftpd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/pin/tftp/v3/netascii"
	"golang.org/x/sys/unix"
)

// readFull reads into bufs, in order, until they are full or the file
// ends, with as few calls to readv as the file allows (one, unless it ends
// or is a pipe), and returns how many bytes it read. It changes bufs, not
// what they point to.
func readFull(readv func([][]byte) (int, error), bufs [][]byte) (int, error) {
	total := 0
	for len(bufs) > 0 {
		n, err := readv(bufs)
		total += n
		if err != nil {
			return total, err
		}
		if n == 0 {
			return total, nil // end of file
		}
		for len(bufs) > 0 && n >= len(bufs[0]) {
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
		if len(bufs) > 0 {
			bufs[0] = bufs[0][n:]
		}
	}
	return total, nil
}

// fileVec reads a file into several buffers in one call: preadv2 with
// RWF_NOWAIT, made as a raw system call, while the data is in the page
// cache; readv(2) as a runtime system call when it is not, or where
// RWF_NOWAIT is refused (rawio.go says why). It is made
// once per transfer and allocates nothing per read: its iovecs and the
// function handed to RawConn.Read are its own.
type fileVec struct {
	rc  syscall.RawConn
	iov []unix.Iovec
	n   int
	err error
	do  func(fd uintptr) bool
	// wait: preadv2(RWF_NOWAIT) is refused here; every read is a
	// runtime system call.
	wait bool
}

// preadv2NoWait is preadv2(RWF_NOWAIT) of iov at, and moving, fd's
// offset, as a raw system call. It is a variable so that a test can stand
// in for a kernel that answers 0 short of the end of the file.
var preadv2NoWait = func(fd uintptr, iov []unix.Iovec) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall6(unix.SYS_PREADV2, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)),
		^uintptr(0), ^uintptr(0), unix.RWF_NOWAIT) // offset -1 (both halves, for 32-bit kernels)
	return int(r), e
}

func newFileVec(rc syscall.RawConn, window int) *fileVec {
	v := &fileVec{rc: rc, iov: make([]unix.Iovec, 0, window), wait: !rawCalls.Load() || !nowaitReads}
	v.do = func(fd uintptr) bool {
		for {
			var r int
			var e syscall.Errno
			nowait := !v.wait
			if nowait {
				// From the page cache, or EAGAIN at once (see rawio.go).
				r, e = preadv2NoWait(fd, v.iov)
				if e == unix.ENOSYS || e == unix.EOPNOTSUPP || e == unix.EINVAL {
					v.wait = true // a kernel or file system without RWF_NOWAIT
				}
			}
			// Not cached (or no RWF_NOWAIT): a read that may wait for the
			// disk. A 0 for a request that is never empty is the end of
			// the file, or, on Linux 5.9 and 5.10, data not cached
			// (readv(2), BUGS): taken for the end, it would end the
			// transfer short. The ordinary read tells them apart, for one
			// more call at the end of each file.
			if v.wait || e == unix.EAGAIN || nowait && e == 0 && r == 0 {
				var rr uintptr
				rr, _, e = unix.Syscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&v.iov[0])), uintptr(len(v.iov)))
				r = int(rr)
			}
			if e == unix.EINTR {
				continue
			}
			v.n, v.err = r, nil
			if e != 0 {
				v.n, v.err = 0, e
			}
			return true
		}
	}
	return v
}

// read is readv of bufs, none of them empty; at most window of them.
func (v *fileVec) read(bufs [][]byte) (int, error) {
	v.iov = v.iov[:0]
	for _, b := range bufs {
		var iov unix.Iovec
		iov.Base = &b[0]
		iov.SetLen(len(b))
		v.iov = append(v.iov, iov)
	}
	if err := v.rc.Read(v.do); err != nil {
		return 0, err
	}
	return v.n, v.err
}

// netasciiReader converts a file to netascii (RFC 1350: CR LF line ends,
// CR NUL for a bare CR) with pin/tftp's converter.
func netasciiReader(r io.Reader) io.Reader { return netascii.ToReader(r) }

// sender sends one file in windows of DATA blocks (RFC 7440; a window of
// one is RFC 1350's lock step): it keeps up to window blocks from the
// first one not acknowledged in flight, then it waits. An ACK of any block
// sent acknowledges it and every block before it.
//
// The client it is written for is edk2's, and every client that keeps
// only the block it expects: it acknowledges each window blocks it takes
// in order, counted from its last ACK, and on any block it did not expect
// (a later one after a gap, or one it already has) it acknowledges the
// last block it has again and counts from there. So an ACK of the window
// block after the client's last ACK is a window taken in order: the
// blocks in flight after it are on their way, and only the blocks it lets
// into the window are sent. Any other ACK (one within the window, or a
// repeat of the block before it) says the client got a block it did not
// expect. When that block was a copy of one it had (an echo of a block
// sent twice), nothing was lost; otherwise the client lacks the first
// block not acknowledged and threw away what came after it, and
// everything not acknowledged is sent again at once, not after Timeout.
//
// The sender cannot tell the two apart by the ACK, so it counts: every
// block it sends again may bring one such ACK (an echo, or the repeat of a
// block after the gap), and that many are taken as such before one sends
// again. When the client then takes blocks up to the last one sent again
// in order, the sender takes it that the first sends got through and the
// count is at least the copies of those blocks, which will come back as
// echoes; once the client takes, in order, a block sent after the last
// send again, every copy has arrived and the count is dropped. Without
// the count a network that reorders or duplicates (or a window sent again
// after Timeout) makes the client repeat an ACK for each copy, each repeat
// would send the window again, its copies would make more repeats, and one
// late datagram would send the rest of the transfer four to seven times
// (TestWindowUnreliableNetwork). Its price: when the first sends did not
// get through (a block lost, and the client took the copies), a block
// lost in the next window is sent again after Timeout, not at once.
//
// In lock step (a window of one) every repeat is ignored, as RFC 1350
// servers do (sending again on each is the Sorcerer's Apprentice bug).
// Without an ACK that moves the window, everything not acknowledged is
// sent again after each Timeout, up to Retries sends in all. A transfer
// still running at its time limit (timeLimit: Retries plus 60 Timeouts,
// or one per 8 KiB of the file if more) ends with an ERROR, so that a
// client that acknowledges a block now and then, just often enough,
// cannot hold its place for days; ACKs that arrived by then still count. ACKs of
// blocks already acknowledged or not sent yet, and datagrams from any
// other address or port than the client's, are ignored.
type sender struct {
	conn    *net.UDPConn
	to      *net.UDPAddr
	timeout time.Duration
	retries int
	blksize int
	window  int       // DATA packets in flight before waiting for an ACK
	confirm func()    // called on the client's first acknowledgement
	end     time.Time // the transfer ends with errTooSlow from then on (zero: never)
	overdue bool      // end has passed once, and the ACKs queued by then were read
	gso     *gso      // segmented sends of a window (nil: one send per block)
	io      *udpIO    // the socket's calls without the runtime's bookkeeping (nil: conn's own)
	// readv, if set, reads the file behind run's reader into several
	// buffers in one call: a window per readv(2), not a read per block
	// (in lock step, one block per call, without the runtime's
	// bookkeeping: rawio.go). nil for netascii, which converts as it reads.
	readv func([][]byte) (int, error)
	// size, if sized, is the file's size at open (not for netascii, which
	// converts as it reads). A file that ends before it or runs past it
	// ends the transfer with errReadSource: its last block would otherwise
	// pass for the end of the file, and the client would take a short or
	// a changed file as whole.
	size  int64
	sized bool

	sent, acked int   // datagrams sent, ACKs that moved the transfer on: for the log line
	cause       error // the read error behind errReadSource
	rbuf        [maxRequest]byte
}

// errQuiet is a client that acknowledged nothing new within Retries sends
// of what is in flight, each waiting up to Timeout.
var errQuiet = &net.OpError{Op: "read", Net: "udp", Err: os.ErrDeadlineExceeded}

// errTooSlow ends a transfer that outlived its time limit (sender.end);
// the client is told so.
var errTooSlow = errors.New("transfer too slow")

// run sends the OACK (if oack is not nil) and then the file. It stops
// at the next ACK once done is closed, telling the client.
func (x *sender) run(done <-chan struct{}, r io.Reader, oack []string) (int64, error) {
	echoes := 0 // ACKs out of order still to be taken as echoes or repeats
	if oack != nil {
		sends, err := x.sendOACK(oackPacket(oack))
		if err != nil {
			return 0, err
		}
		echoes = sends - 1 // each OACK after the first may bring another ACK 0
	}
	// Block b (counted from 1, without wrapping) is read into slot
	// b%window of buf and kept in win until the client acknowledges it:
	// the only copy of the file a transfer holds.
	slot := 4 + x.blksize
	buf := make([]byte, x.window*slot)
	win := make([][]byte, 0, x.window) // blocks base, base+1, ...
	var iovs [][]byte                  // the free slots, for x.readv
	if x.readv != nil {
		iovs = make([][]byte, 0, x.window)
	}
	var read int64 // bytes read from r, for x.size
	var n int64
	eof := false  // the last block, shorter than blksize, has been read
	base := 1     // the first block not acknowledged
	inFlight := 0 // win[:inFlight] are sent
	again := 0    // the last block of the last send again
	resent := 0   // how many blocks the last send again sent, up to again
	tries := 1    // sends of what is in flight without an ACK that moved it
	moved := true // the window moved since a repeat last sent it again
	sendAgain := func() {
		again, resent, inFlight = base+inFlight-1, inFlight, 0
		echoes = min(echoes+resent, 2*x.window)
	}
	for {
		select {
		case <-done:
			x.abort(errStopping)
			return n, errStopping
		default:
		}
		if x.readv != nil && len(win) < x.window && !eof {
			// Every free slot in one call: a window per read, not a block.
			iovs = iovs[:0]
			for i := len(win); i < x.window; i++ {
				iovs = append(iovs, buf[(base+i)%x.window*slot:][4:slot])
			}
			got, err := readFull(x.readv, iovs)
			if err != nil {
				x.cause = err
				x.abort(errReadSource)
				return n, errReadSource
			}
			for len(win) < x.window && !eof {
				b := base + len(win)
				p := buf[b%x.window*slot:][:slot]
				l := min(got, x.blksize)
				got -= l
				read += int64(l)
				binary.BigEndian.PutUint16(p, opDATA)
				binary.BigEndian.PutUint16(p[2:], uint16(b))
				win = append(win, p[:4+l])
				eof = l < x.blksize
			}
		}
		for len(win) < x.window && !eof {
			b := base + len(win)
			p := buf[b%x.window*slot:][:slot]
			l, err := io.ReadFull(r, p[4:])
			if err != nil && err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) {
				x.cause = err
				x.abort(errReadSource)
				return n, errReadSource
			}
			binary.BigEndian.PutUint16(p, opDATA)
			binary.BigEndian.PutUint16(p[2:], uint16(b)) // wraps to 0 after 65535, as clients expect
			win = append(win, p[:4+l])
			eof = l < x.blksize
			read += int64(l)
		}
		if x.sized && (read > x.size || eof && read != x.size) {
			x.cause = fmt.Errorf("the file ended after %d bytes; it had %d at open", read, x.size)
			if !eof {
				x.cause = fmt.Errorf("the file runs past the %d bytes it had at open", x.size)
			}
			x.abort(errReadSource)
			return n, errReadSource
		}
		if len(win) == 0 {
			return n, nil // the last block is acknowledged
		}
		if inFlight < len(win) {
			if err := x.send(win[inFlight:]); err != nil {
				return n, err
			}
			inFlight = len(win)
			if err := x.deadline(); err != nil {
				return n, err
			}
		}
		a, err := x.next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if x.late() {
				select {
				case <-done:
					continue // shutdown says why, not the limit
				default:
				}
				if x.overdue {
					x.abort(errTooSlow)
					return n, errTooSlow
				}
				// A read past its deadline reads nothing, even what came
				// before it: take what is queued (the last ACK, maybe)
				// before giving up.
				x.overdue, x.end = true, time.Now().Add(overdueRead)
				if err := x.conn.SetReadDeadline(x.end); err != nil {
					return n, err
				}
				continue
			}
			if tries++; tries > x.retries {
				return n, errQuiet
			}
			sendAgain() // the client may have had all of it
			continue
		}
		if err != nil {
			return n, err
		}
		// Place the ACK by its distance from the block before base,
		// modulo 2^16: 0 is a repeat of it, 1..inFlight moves the window,
		// anything else (older, or not sent yet) is ignored.
		d := int(a - uint16(base-1))
		if d > inFlight || (d == 0 && x.window == 1) {
			continue
		}
		// The client counts its window from its last ACK, which is
		// base-1: an ACK a window further on is a window taken in order.
		inOrder := d == x.window
		if d > 0 {
			if x.acked++; x.acked == 1 && x.confirm != nil {
				x.confirm()
			}
			for _, p := range win[:d] {
				n += int64(len(p) - 4)
			}
			base += d
			win = append(win[:0], win[d:]...)
			inFlight -= d
			tries, moved = 1, true
			if err := x.deadline(); err != nil {
				return n, err
			}
			// An ACK in order takes the whole window, so its block,
			// base-1, is never before again, the last block of the last
			// send again (which was at most a window from an earlier
			// base).
			switch {
			case inOrder && base-1 > again:
				echoes = 0 // the copies, sent before block base-1, have all arrived
			case inOrder:
				// The client took the first sends of the blocks sent
				// again in order: each of their copies will be an echo.
				echoes = max(echoes, resent)
			}
		}
		switch {
		case inFlight == 0:
			// Nothing lost: an ACK in order, or one of the last block
			// sent, empties the window.
		case echoes > 0:
			echoes--
		case d == 0 && (!moved || tries >= x.retries):
			// A repeat that sends nothing: either the window went again
			// on a repeat already since an ACK last moved it (whatever a
			// client repeats, a repeat sends the window again at most
			// once per ACK that moves it), or Retries sends are spent.
			// A repeat never ends the transfer; the next Timeout does if
			// nothing moves it.
		default:
			if d == 0 {
				tries++ // a send again that no ACK moved counts as a try
			}
			moved = d > 0
			sendAgain() // the client lacks block base
		}
	}
}

// sendOACK sends the OACK until the client acknowledges it (ACK 0), up to
// Retries times, and reports how many times it went.
func (x *sender) sendOACK(oack []byte) (int, error) {
	for try := 1; try <= x.retries; try++ {
		if err := x.send([][]byte{oack}); err != nil {
			return try, err
		}
		if err := x.deadline(); err != nil {
			return try, err
		}
		for {
			a, err := x.next()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if x.late() {
					x.abort(errTooSlow)
					return try, errTooSlow
				}
				break
			}
			if err != nil {
				return try, err
			}
			if a == 0 {
				if x.acked++; x.acked == 1 && x.confirm != nil {
					x.confirm()
				}
				return try, nil
			}
		}
	}
	return x.retries, errQuiet
}

// send writes pkts to the client, counting them: runs of blocks in one
// segmented send each where x.gso allows (gso.go), the rest one by one.
func (x *sender) send(pkts [][]byte) error {
	for len(pkts) > 0 {
		if x.gso != nil {
			if k := x.gso.run(pkts); k > 1 {
				sent, err := x.gso.send(pkts[:k])
				if err != nil {
					return err
				}
				if sent {
					x.sent += k
					pkts = pkts[k:]
					continue
				}
			}
		}
		if x.io != nil {
			if err := x.io.send(pkts[0]); err != nil {
				return err
			}
		} else if _, err := x.conn.WriteToUDP(pkts[0], x.to); err != nil {
			return err
		}
		x.sent++
		pkts = pkts[1:]
	}
	return nil
}

// deadline gives the client Timeout from now to acknowledge something,
// or what is left of the transfer's time limit if that is less.
func (x *sender) deadline() error {
	t := time.Now().Add(x.timeout)
	if !x.end.IsZero() && x.end.Before(t) {
		t = x.end
	}
	return x.conn.SetReadDeadline(t)
}

// overdueRead is how long the sender reads what is queued once the time
// limit has passed.
const overdueRead = 10 * time.Millisecond

// late reports whether the transfer's time limit has passed.
func (x *sender) late() bool { return !x.end.IsZero() && !time.Now().Before(x.end) }

// next reads until an ACK or an ERROR from the client, or the deadline,
// and returns the ACK's block number.
func (x *sender) next() (uint16, error) {
	for {
		n, err := x.read()
		if err != nil {
			return 0, err
		}
		if n < 4 {
			continue
		}
		switch binary.BigEndian.Uint16(x.rbuf[:]) {
		case opACK:
			return binary.BigEndian.Uint16(x.rbuf[2:]), nil
		case opERROR:
			return 0, parseClientError(x.rbuf[:n])
		}
	}
}

// read reads the next datagram from the client into x.rbuf.
func (x *sender) read() (int, error) {
	if x.io != nil {
		return x.io.recv(x.rbuf[:])
	}
	for {
		n, from, err := x.conn.ReadFromUDP(x.rbuf[:])
		if err != nil || from.Port == x.to.Port && from.IP.Equal(x.to.IP) {
			return n, err
		}
	}
}

// abort tells the client why the transfer ends; the client may be gone,
// so a failure to send is not reported.
func (x *sender) abort(why error) {
	_, _ = x.conn.WriteToUDP(errorPacket(why.Error()), x.to)
}
