//go:build 386 || arm || mips || mipsle || ppc

package httpserver

import "golang.org/x/sys/unix"

// sysSendfile is sendfile with a 64-bit offset: sendfile64 on 32-bit
// kernels, whose sendfile takes a 32-bit one.
const sysSendfile = unix.SYS_SENDFILE64
