package sockprio

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// What a marked socket sends carries the class, as a receiver with
// IP_RECVTOS sees it, and the socket has the interactive priority.
func TestSetMarksPackets(t *testing.T) {
	for _, class := range []int{NetworkControl, LowDelay} {
		rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer rx.Close()
		rc, _ := rx.SyscallConn()
		_ = rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1) })
		if err != nil {
			t.Fatal(err)
		}
		tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		tc, _ := tx.SyscallConn()
		var prio int
		_ = tc.Control(func(fd uintptr) {
			if err = Set(int(fd), false, class); err == nil {
				prio, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PRIORITY)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if prio != interactive {
			t.Errorf("class %#x: SO_PRIORITY %d, want %d", class, prio, interactive)
		}
		if _, err := tx.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		buf, oob := make([]byte, 16), make([]byte, 64)
		_, oobn, _, _, err := rx.ReadMsgUDP(buf, oob)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		got := -1
		for _, m := range msgs {
			if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) > 0 {
				got = int(m.Data[0])
			}
		}
		if got != class {
			t.Errorf("received TOS %#x, want %#x", got, class)
		}
	}
}
