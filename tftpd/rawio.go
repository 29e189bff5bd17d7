package tftpd

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A transfer's hot loop, in lock step, is four system calls per block: a
// read of the file, a sendto, a recvfrom that finds nothing yet, and the
// recvfrom of the ACK. Made through the syscall package, each one is a
// runtime system call: on the way in it wakes the runtime's monitor
// thread (sysmon) whenever every Go processor was idle, and a woken
// monitor polls every 20 µs for the next millisecond. Fifty lock-step
// transfers leave every processor idle between ACKs many times a
// millisecond, so the monitor never settles: its wakeups and the thread
// switches around them were a fifth of the server's CPU in the TFTP
// benchmark (BENCHMARKS.md, "The runtime's monitor"). On a VM a thread
// switch costs far more than the call itself.
//
// The socket calls cannot block (the socket is non-blocking; EAGAIN waits
// in the network poller, under the read deadline, as net.UDPConn's own
// calls do), so they are made as raw system calls, which the runtime does
// not track. The file is read with preadv2(RWF_NOWAIT) the same way: it
// returns at once from the page cache, or EAGAIN when it would wait for
// the disk, and only then (or on a 0, see nowaitReads) is the read made
// as a runtime system call, which lets the runtime run other goroutines
// meanwhile.

// nowaitReads: file reads start with a raw preadv2(RWF_NOWAIT); before
// Linux 5.11 every read is a runtime system call. Before 5.9 RWF_NOWAIT
// could still start readahead, which may sleep (it implies IOCB_NOIO from
// 5.9 on); a raw call that sleeps holds its Go processor, and a garbage
// collection waits for it. 5.9 and 5.10 are left out too: there it may
// answer 0, as at the end of the file, for data not cached (readv(2),
// BUGS). fileVec confirms every 0 with an ordinary read all the same, as
// a release number need not tell which fixes a kernel carries.
//
// Later kernels may still start readahead: on 6.18 with ext4 a preadv2
// that answered EAGAIN had the pages it asked for resident 100 ms later.
// Submitting that I/O may sleep briefly, though the call does not wait
// for the data. That is accepted: it comes only with the first touch of
// data not cached, and a boot file is read from memory after its first
// transfer.
var nowaitReads = kernelAtLeast(5, 11)

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor; false when it cannot tell.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return releaseAtLeast(unix.ByteSliceToString(u.Release[:]), major, minor)
}

// releaseAtLeast reports whether a kernel release is at least
// major.minor, comparing numbers (5.10 is after 5.9); false when it cannot
// tell.
func releaseAtLeast(release string, major, minor int) bool {
	ma, mi, ok := parseRelease(release)
	return ok && (ma > major || ma == major && mi >= minor)
}

// parseRelease reads the major and minor numbers at the start of a kernel
// release ("6.1.0-13-amd64", "6.18.44-fc-v1294", "6.1-rc1"); ok is false
// unless it starts with two decimal numbers and a dot between them.
func parseRelease(release string) (major, minor int, ok bool) {
	major, rest, ok := leadingNumber(release)
	if !ok || !strings.HasPrefix(rest, ".") {
		return 0, 0, false
	}
	minor, _, ok = leadingNumber(rest[1:])
	if !ok {
		return 0, 0, false
	}
	return major, minor, true
}

// leadingNumber is the decimal number at the start of s and what follows
// it; ok is false when s does not start with a digit or the number
// overflows an int.
func leadingNumber(s string) (n int, rest string, ok bool) {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(s[:i])
	return n, s[i:], err == nil
}

// rawCalls is false only in tests that measure the runtime system calls
// the raw calls replace.
var rawCalls atomic.Bool

func init() { rawCalls.Store(true) }

// udpIO sends datagrams to one client and reads the datagrams that come
// from it, on a transfer's non-blocking socket. Made once per transfer,
// it allocates nothing per datagram.
type udpIO struct {
	rc    syscall.RawConn
	to    unix.RawSockaddrAny // the client
	toLen uint32
	// local and client are the socket's address and to, for errors.
	local, client *net.UDPAddr

	out     []byte // the datagram send is sending
	sendErr error
	sendFn  func(fd uintptr) bool

	segs   [][]byte // the datagrams sendSegments is sending, in one sendmsg
	oob    []byte
	iov    [gsoMaxSegments]unix.Iovec
	msg    unix.Msghdr
	segsFn func(fd uintptr) bool

	in      []byte // the buffer recv reads into
	n       int
	from    unix.RawSockaddrAny
	fromLen uint32
	recvErr error
	recvFn  func(fd uintptr) bool
}

// newUDPIO is a udpIO on conn for client to; nil when conn has no
// descriptor or to is not of conn's family (the sender then uses conn's
// own calls).
func newUDPIO(conn *net.UDPConn, to *net.UDPAddr) *udpIO {
	local, _ := conn.LocalAddr().(*net.UDPAddr)
	if local == nil || !rawCalls.Load() {
		return nil
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil
	}
	u := &udpIO{rc: rc, local: local, client: to}
	switch {
	case to.IP.To4() != nil && local.IP.To4() != nil:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&u.to))
		sa.Family = unix.AF_INET
		putPort(&sa.Port, to.Port)
		copy(sa.Addr[:], to.IP.To4())
		u.toLen = unix.SizeofSockaddrInet4
	case to.IP.To4() == nil && to.IP.To16() != nil && to.Zone == "" && local.IP.To4() == nil:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&u.to))
		sa.Family = unix.AF_INET6
		putPort(&sa.Port, to.Port)
		copy(sa.Addr[:], to.IP.To16())
		u.toLen = unix.SizeofSockaddrInet6
	default:
		return nil
	}
	u.sendFn = u.sendStep
	u.segsFn = u.segsStep
	u.recvFn = u.recvStep
	return u
}

// putPort stores port in network byte order, as sockaddr_in wants it.
func putPort(p *uint16, port int) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

// send sends p to the client, waiting in the poller while the socket's
// buffer is full.
func (u *udpIO) send(p []byte) error {
	u.out, u.sendErr = p, nil
	err := u.rc.Write(u.sendFn)
	u.out = nil
	if err == nil {
		err = u.sendErr
	}
	if err != nil {
		return u.opError("write", err)
	}
	return nil
}

// opError is err, from the RawConn or from a raw call, as the net.UDPConn
// call it stands for reports it: "read udp 127.0.0.1:1234: i/o timeout",
// not the RawConn's "raw-read" inside another error. It wraps what it
// was given, so errors.Is still finds os.ErrDeadlineExceeded,
// net.ErrClosed or the errno.
func (u *udpIO) opError(op string, err error) error {
	e := &net.OpError{Op: op, Net: "udp", Source: u.local, Err: err}
	if op == "write" {
		e.Addr = u.client
	}
	if raw, ok := err.(*net.OpError); ok {
		e.Err = raw.Err // the RawConn's own, of the same socket
	}
	return e
}

func (u *udpIO) sendStep(fd uintptr) bool {
	for {
		var p unsafe.Pointer
		if len(u.out) > 0 {
			p = unsafe.Pointer(&u.out[0])
		}
		_, _, e := syscall.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(p), uintptr(len(u.out)), 0,
			uintptr(unsafe.Pointer(&u.to)), uintptr(u.toLen))
		if e != unix.EINTR {
			return settle(e, "sendto", &u.sendErr)
		}
	}
}

// settle ends a RawConn step after its raw call returned e: false (wait
// in the poller, and call again) on EAGAIN, true otherwise, with *err set
// to what failed, if anything did.
func settle(e syscall.Errno, call string, err *error) bool {
	switch e {
	case 0:
		return true
	case unix.EAGAIN:
		return false
	}
	*err = os.NewSyscallError(call, e)
	return true
}

// errTooManySegments is sendSegments given more datagrams than its
// iovecs hold (gsoMaxSegments).
var errTooManySegments = errors.New("tftpd: more segments than one send carries")

// sendSegments sends segs, at most gsoMaxSegments of them and none
// empty, in one sendmsg with the control message oob (gso.go's
// UDP_SEGMENT). gso.send sorts its errors by their errno; more segments
// than that are refused, not cut short.
func (u *udpIO) sendSegments(segs [][]byte, oob []byte) error {
	if len(segs) > len(u.iov) {
		return errTooManySegments
	}
	u.segs, u.oob, u.sendErr = segs, oob, nil
	err := u.rc.Write(u.segsFn)
	u.segs, u.oob = nil, nil
	if err == nil {
		err = u.sendErr
	}
	return err
}

func (u *udpIO) segsStep(fd uintptr) bool {
	for i, b := range u.segs {
		u.iov[i].Base = &b[0]
		u.iov[i].SetLen(len(b))
	}
	u.msg = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&u.to)), Namelen: u.toLen, Iov: &u.iov[0]}
	u.msg.SetIovlen(len(u.segs))
	if len(u.oob) > 0 {
		u.msg.Control = &u.oob[0]
		u.msg.SetControllen(len(u.oob))
	}
	for {
		_, _, e := syscall.RawSyscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&u.msg)), 0)
		if e != unix.EINTR {
			return settle(e, "sendmsg", &u.sendErr)
		}
	}
}

// errEmptyBuffer is recv given nowhere to read to.
var errEmptyBuffer = errors.New("tftpd: recv into an empty buffer")

// recv reads the next datagram from the client into buf, waiting in the
// poller under the socket's read deadline; datagrams from anyone else are
// read and dropped. It returns the datagram's length.
func (u *udpIO) recv(buf []byte) (int, error) {
	u.in = buf
	for {
		u.recvErr = nil
		err := u.rc.Read(u.recvFn)
		if err == nil {
			err = u.recvErr
		}
		if err != nil {
			u.in = nil
			return 0, u.opError("read", err)
		}
		if u.fromClient() {
			u.in = nil
			return u.n, nil
		}
	}
}

func (u *udpIO) recvStep(fd uintptr) bool {
	if len(u.in) == 0 {
		u.recvErr = errEmptyBuffer
		return true
	}
	for {
		u.fromLen = uint32(unsafe.Sizeof(u.from))
		r, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&u.in[0])), uintptr(len(u.in)), 0,
			uintptr(unsafe.Pointer(&u.from)), uintptr(unsafe.Pointer(&u.fromLen)))
		if e != unix.EINTR {
			u.n = int(r)
			return settle(e, "recvfrom", &u.recvErr)
		}
	}
}

// fromClient reports whether the datagram recv read came from the
// client's address and port (a link-local client's zone is not compared,
// as net.IP.Equal does not).
func (u *udpIO) fromClient() bool {
	switch u.to.Addr.Family {
	case unix.AF_INET:
		a := (*unix.RawSockaddrInet4)(unsafe.Pointer(&u.from))
		b := (*unix.RawSockaddrInet4)(unsafe.Pointer(&u.to))
		return u.fromLen >= unix.SizeofSockaddrInet4 && a.Family == b.Family && a.Port == b.Port && a.Addr == b.Addr
	case unix.AF_INET6:
		a := (*unix.RawSockaddrInet6)(unsafe.Pointer(&u.from))
		b := (*unix.RawSockaddrInet6)(unsafe.Pointer(&u.to))
		return u.fromLen >= unix.SizeofSockaddrInet6 && a.Family == b.Family && a.Port == b.Port && a.Addr == b.Addr
	}
	return false
}
