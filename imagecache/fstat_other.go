//go:build !(amd64 || arm64 || riscv64 || ppc64 || ppc64le || s390x || 386 || arm || mips || mipsle)

package imagecache

import "golang.org/x/sys/unix"

// fstat is unix.Fstat here: mips64's unix.Stat_t is converted from the
// kernel's own layout, and loong64 has no fstat before Linux 6.11 (x/sys
// uses statx), so a raw call would misread or fail.
func fstat(fd uintptr, st *unix.Stat_t) error { return unix.Fstat(int(fd), st) }
