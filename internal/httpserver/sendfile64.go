//go:build !(386 || arm || mips || mipsle || ppc)

package httpserver

import "golang.org/x/sys/unix"

// sysSendfile is sendfile with a 64-bit offset.
const sysSendfile = unix.SYS_SENDFILE
