package httpserver

import (
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A response's system calls on a connection's socket are raw system
// calls, which the Go runtime does not track. Made through the syscall
// package, every call enters the runtime's system-call state, and the
// first one after every Go processor was idle wakes the runtime's monitor
// thread (sysmon), which then polls every 20 µs for a millisecond or
// more. Under many connections the processors go idle between responses
// many times a millisecond: the monitor's sleeps were almost half of
// siteboot's thread switches under wrk, the CPUs sat idle between them,
// and nginx, which has no such thread, served more (BENCHMARKS.md, "The
// runtime's monitor"). The same held for TFTP (package tftpd).
//
// A raw call must not sleep: while it runs it holds its Go processor, and
// a garbage collection waits for it. The socket calls cannot (the socket
// is non-blocking; EAGAIN waits in the network poller, under the
// deadline, as net.TCPConn's own calls do). sendfile can, when it reads a
// page that is not in memory, or one whose read from the disk is still
// under way: it is raw only for SendResidentAt, whose caller has checked
// every page of the range is in memory and read (the image cache asks
// mincore, which counts a page only once its read is done; cachestat
// counts it as soon as readahead inserts it, so it cannot tell).

// rawCalls: the calls below are raw system calls; false makes them the
// runtime's way (syscall.Syscall6), for tests that compare the two.
var rawCalls atomic.Bool

func init() { rawCalls.Store(true) }

// SetRawCalls makes a response's socket calls raw system calls (true, the
// default) or the runtime's, and returns the setting it replaces. It is
// for tests and A/B measurements of the difference.
func SetRawCalls(on bool) bool { return rawCalls.Swap(on) }

// call6 is a system call, raw unless rawCalls is off. It is nosplit, as
// the syscall package's own calls are: a caller may pass the address of
// one of its locals as a uintptr, and a stack that grew in call6's
// prologue would move that local away from the address the kernel reads.
//
//go:nosplit
func call6(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, syscall.Errno) {
	if rawCalls.Load() {
		r, _, e := syscall.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
		return r, e
	}
	r, _, e := syscall.Syscall6(trap, a1, a2, a3, a4, a5, a6)
	return r, e
}

// rawSetsockoptInt sets an int socket option, as unix.SetsockoptInt does.
func rawSetsockoptInt(fd uintptr, level, opt, v int) error {
	val := int32(v)
	_, e := call6(unix.SYS_SETSOCKOPT, fd, uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&val)), unsafe.Sizeof(val), 0)
	if e != 0 {
		return os.NewSyscallError("setsockopt", e)
	}
	return nil
}

// rawSend is send(2) of p with flags: the bytes sent, and the errno.
func rawSend(fd uintptr, p []byte, flags int) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, e := call6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
		uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// rawRecv is read(2) into p: the bytes read (0 at the end of the
// stream), and the errno.
func rawRecv(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, e := call6(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// rawSendfile is sendfile(2) of count bytes of src from *off to the
// socket: the bytes sent, and the errno. Call it only for a range whose
// pages are all in memory and read (SendResidentAt).
func rawSendfile(sock uintptr, src int, off *int64, count int) (int, syscall.Errno) {
	n, e := call6(sysSendfile, sock, uintptr(src), uintptr(unsafe.Pointer(off)), uintptr(count), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}
