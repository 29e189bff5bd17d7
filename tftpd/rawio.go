package tftpd

import (
	"errors"
	"fmt"
	"net"
	"os"
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
// the disk, and only then is the read made as a runtime system call, which
// lets the runtime run other goroutines meanwhile.

// nowaitReads: preadv2(RWF_NOWAIT) never waits for the disk here. Before
// Linux 5.9 it could still start readahead, which may sleep (RWF_NOWAIT
// implies IOCB_NOIO from 5.9 on); a raw call that sleeps holds its Go
// processor, and a garbage collection waits for it. Older kernels read
// every block the ordinary way.
var nowaitReads = kernelAtLeast(5, 9)

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor; false when it cannot tell.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	if n, _ := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); n != 2 {
		return false
	}
	return ma > major || ma == major && mi >= minor
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
	u := &udpIO{rc: rc}
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
		return &net.OpError{Op: "write", Net: "udp", Err: err}
	}
	return nil
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

// sendSegments sends segs, at most gsoMaxSegments of them and none
// empty, in one sendmsg with the control message oob (gso.go's
// UDP_SEGMENT). gso.send sorts its errors by their errno.
func (u *udpIO) sendSegments(segs [][]byte, oob []byte) error {
	u.segs, u.oob, u.sendErr = segs, oob, nil
	err := u.rc.Write(u.segsFn)
	u.segs, u.oob = nil, nil
	if err == nil {
		err = u.sendErr
	}
	return err
}

func (u *udpIO) segsStep(fd uintptr) bool {
	n := min(len(u.segs), len(u.iov))
	for i, b := range u.segs[:n] {
		u.iov[i].Base = &b[0]
		u.iov[i].SetLen(len(b))
	}
	u.msg = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&u.to)), Namelen: u.toLen, Iov: &u.iov[0]}
	u.msg.SetIovlen(n)
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
			return 0, &net.OpError{Op: "read", Net: "udp", Err: err}
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
