//go:build amd64 || arm64 || riscv64 || ppc64 || ppc64le || s390x || 386 || arm || mips || mipsle

package imagecache

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fstat fills st for the open file fd with a raw system call: it reads
// the inode in memory and does not wait for the disk on a local file
// system. Only where the kernel's struct stat is unix.Stat_t as it is.
func fstat(fd uintptr, st *unix.Stat_t) error {
	if _, _, e := syscall.RawSyscall(sysFstat, fd, uintptr(unsafe.Pointer(st)), 0); e != 0 {
		return e
	}
	return nil
}
