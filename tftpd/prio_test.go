package tftpd

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/sockprio"
	"golang.org/x/sys/unix"
)

// A transfer's OACK and DATA leave marked low-delay, so that the host's
// queueing discipline sends them ahead of bulk streams; so does a refusal
// from the listening socket.
func TestTransferPacketsAreLowDelay(t *testing.T) {
	fx := start(t, Config{Timeout: noTimeout, Retries: 1})
	c := dialFrom(t, "127.0.0.1", fx.addr, nil)
	defer c.Close()
	rc, _ := c.SyscallConn()
	var err error
	_ = rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1) })
	if err != nil {
		t.Fatal(err)
	}
	tos := func() (uint16, int) {
		t.Helper()
		buf, oob := make([]byte, 2048), make([]byte, 64)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, oobn, _, _, err := c.ReadMsgUDP(buf, oob)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) > 0 && n >= 2 {
				return binary.BigEndian.Uint16(buf), int(m.Data[0])
			}
		}
		t.Fatal("no IP_TOS control message")
		return 0, 0
	}
	send(t, c, fx.addr, request(1, "ipxe.efi", "octet", "blksize", "1468"))
	if op, got := tos(); op != opOACK || got != sockprio.LowDelay {
		t.Errorf("OACK: opcode %d with TOS %#x, want %d with %#x", op, got, opOACK, sockprio.LowDelay)
	}
	send(t, c, fx.addr, request(1, "../etc/passwd", "octet"))
	if op, got := tos(); op != opERROR || got != sockprio.LowDelay {
		t.Errorf("refusal: opcode %d with TOS %#x, want %d with %#x", op, got, opERROR, sockprio.LowDelay)
	}
}
