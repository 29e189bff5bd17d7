//go:build 386 || arm || mips || mipsle

package imagecache

import "golang.org/x/sys/unix"

// sysFstat is the fstat that fills unix.Stat_t: fstat64 on 32-bit
// kernels.
const sysFstat = unix.SYS_FSTAT64
