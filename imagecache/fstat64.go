//go:build amd64 || arm64 || riscv64 || ppc64 || ppc64le || s390x

package imagecache

import "golang.org/x/sys/unix"

// sysFstat is the fstat that fills unix.Stat_t.
const sysFstat = unix.SYS_FSTAT
