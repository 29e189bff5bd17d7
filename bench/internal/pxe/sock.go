package pxe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ListenConfig sets what a DHCP client socket needs: SO_REUSEADDR (share
// :68), SO_BROADCAST (send to 255.255.255.255), a large receive buffer
// (bursts of offers) and, when iface is set, SO_BINDTODEVICE.
func ListenConfig(iface string) *net.ListenConfig {
	return &net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = SetSockopts(int(fd), iface) })
		return errors.Join(err, serr)
	}}
}

func SetSockopts(fd int, iface string) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("SO_REUSEADDR: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1); err != nil {
		return fmt.Errorf("SO_BROADCAST: %w", err)
	}
	const rcvbuf = 8 << 20
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvbuf)
	}
	if iface != "" {
		if err := unix.BindToDevice(fd, iface); err != nil {
			return fmt.Errorf("SO_BINDTODEVICE %s: %w", iface, err)
		}
	}
	return nil
}

// OpenSocket binds the client socket at addr (usually 0.0.0.0:68).
func OpenSocket(ctx context.Context, addr, iface string) (net.PacketConn, error) {
	pc, err := ListenConfig(iface).ListenPacket(ctx, "udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return pc, nil
}
