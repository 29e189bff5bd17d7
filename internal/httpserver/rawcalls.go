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
// page that is not in memory: it is made raw only when cachestat (Linux
// 6.5) says every page of the range is cached, and the ordinary way
// otherwise, or where the kernel cannot say.

// rawCalls: the calls below are raw system calls; false makes them the
// runtime's way (syscall.Syscall6), for tests that compare the two.
var rawCalls atomic.Bool

func init() { rawCalls.Store(true) }

// SetRawCalls makes a response's socket calls raw system calls (true, the
// default) or the runtime's, and returns the setting it replaces. It is
// for tests and A/B measurements of the difference.
func SetRawCalls(on bool) bool { return rawCalls.Swap(on) }

// call6 is a system call, raw unless rawCalls is off.
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
// socket: the bytes sent, and the errno. Call it only for a range
// inPageCache reported cached.
func rawSendfile(sock uintptr, src int, off *int64, count int) (int, syscall.Errno) {
	n, e := call6(sysSendfile, sock, uintptr(src), uintptr(unsafe.Pointer(off)), uintptr(count), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// noCachestat is set once the kernel has said it has no cachestat.
var noCachestat atomic.Bool

// pageSize is the kernel's page size, cachestat's unit.
var pageSize = int64(os.Getpagesize())

// inPageCache reports whether every page of the bytes [off, off+n) of the
// file fd is in the page cache, so that sendfile of them does not wait
// for the disk; false when the kernel cannot say (before Linux 6.5, or a
// file system without a page cache). Pages can be reclaimed between the
// look and the sendfile; that is rare, and then costs one sendfile's
// wait on the disk with a processor held, as a page fault would.
func inPageCache(fd int, off, n int64) bool {
	if n <= 0 || off < 0 || noCachestat.Load() || !rawCalls.Load() {
		return false
	}
	rng := unix.CachestatRange{Off: uint64(off), Len: uint64(n)}
	var st unix.Cachestat_t
	_, _, e := syscall.RawSyscall6(unix.SYS_CACHESTAT, uintptr(fd), uintptr(unsafe.Pointer(&rng)),
		uintptr(unsafe.Pointer(&st)), 0, 0, 0)
	if e == unix.ENOSYS {
		noCachestat.Store(true)
	}
	if e != 0 {
		return false
	}
	pages := (off+n-1)/pageSize - off/pageSize + 1
	return st.Cache >= uint64(pages)
}
