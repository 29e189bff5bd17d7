package tftpd

import (
	"encoding/binary"
	"errors"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A window of DATA blocks goes to the kernel in one sendmsg with
// UDP_SEGMENT (UDP generic segmentation offload, Linux 4.18): the kernel
// cuts it into one datagram per block, with the payloads, ports, TOS and
// priority a send per block has, at the NIC or just before it, so the
// socket, the routing and the packet filter are passed once per window
// instead of once per block. Two things differ on the wire: an IPv4
// segment goes without DF (the kernel sets DF by the size of what it was
// given, larger than the MTU) and so with an IP ID; and netfilter and tc
// see one packet of up to 64 KiB per window. Every block but a file's
// last is 4+blksize bytes, so a run of them has the one segment size GSO
// needs; the last, shorter, may end a run. A kernel without UDP_SEGMENT
// (before 4.18 it would ignore the control message and send one large
// datagram) is found by getsockopt before the first send; where the
// kernel refuses a send (an IPsec route, no checksum offload before
// Linux 6.11), the sender sends block by block from then on.

const (
	// gsoMaxSegments is the most datagrams in one send: one under the
	// kernel's UDP_MAX_SEGMENTS (64 before Linux 6.9), which kernels
	// before 5.11 compared with the length including the IP and UDP
	// headers, refusing 64 full segments.
	gsoMaxSegments = 63
	// gsoMaxBytes bounds the payload of one send: a UDP datagram's.
	gsoMaxBytes = 65507
)

// gso is a transfer's segmentation state: where to send, and whether the
// kernel took it.
type gso struct {
	raw syscall.RawConn
	to  unix.Sockaddr
	oob []byte // the UDP_SEGMENT control message, for segment size seg
	seg int
	off bool // not used for this transfer (refused, or not possible)
	// io, when set, makes the sendmsg a raw system call (rawio.go).
	io *udpIO
	// sends counts the sendmsg calls that carried more than one block.
	sends int
}

// newGSO prepares segmented sends from conn to to, or returns one that is
// off: a kernel without UDP_SEGMENT, an IPv6 link-local client (its zone
// would need a lookup) and a client of the other address family go block
// by block.
func newGSO(conn *net.UDPConn, to *net.UDPAddr) *gso {
	g := &gso{off: true}
	raw, err := conn.SyscallConn()
	if err != nil {
		return g
	}
	var optErr error
	if err := raw.Control(func(fd uintptr) {
		_, optErr = unix.GetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT)
	}); err != nil || optErr != nil {
		return g
	}
	local, _ := conn.LocalAddr().(*net.UDPAddr)
	switch {
	case local == nil:
		return g
	case to.IP.To4() != nil && local.IP.To4() != nil:
		sa := &unix.SockaddrInet4{Port: to.Port}
		copy(sa.Addr[:], to.IP.To4())
		g.to = sa
	case to.IP.To4() == nil && to.IP.To16() != nil && to.Zone == "" && local.IP.To4() == nil:
		sa := &unix.SockaddrInet6{Port: to.Port}
		copy(sa.Addr[:], to.IP.To16())
		g.to = sa
	default:
		return g
	}
	g.raw, g.off = raw, false
	return g
}

// run is how many of pkts, from the first, one send may carry: all of one
// size but the last, which may be shorter, within the kernel's bounds.
// Below 2 a send per block is as cheap.
func (g *gso) run(pkts [][]byte) int {
	if g.off || len(pkts) < 2 {
		return 1
	}
	seg := len(pkts[0])
	k, total := 1, seg
	for k < len(pkts) && k < gsoMaxSegments && total+len(pkts[k]) <= gsoMaxBytes {
		l := len(pkts[k])
		if l > seg || l == 0 {
			break
		}
		k, total = k+1, total+l
		if l < seg {
			break // a shorter one ends a run
		}
	}
	return k
}

// send sends pkts (a run) in one sendmsg. It reports false when the
// kernel refuses segmentation; then g is off. The kernel refuses before
// anything leaves, but for an EMSGSIZE after a reroute or a path MTU
// change on the way out: then some blocks of the run go twice, which a
// client ignores as it does any copy.
func (g *gso) send(pkts [][]byte) (bool, error) {
	if seg := len(pkts[0]); seg != g.seg {
		g.oob, g.seg = udpSegment(uint16(seg)), seg
	}
	var err error
	if g.io != nil {
		err = g.io.sendSegments(pkts, g.oob)
	} else {
		var serr error
		err = g.raw.Write(func(fd uintptr) bool {
			_, serr = unix.SendmsgBuffers(int(fd), pkts, g.oob, g.to, 0)
			return !errors.Is(serr, unix.EAGAIN)
		})
		if err == nil {
			err = serr
		}
	}
	switch {
	case err == nil:
		g.sends++
		return true, nil
	case errors.Is(err, unix.EIO), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOPROTOOPT),
		errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EMSGSIZE):
		g.off = true
		return false, nil
	}
	return false, err
}

// udpSegment is the control message that asks the kernel to cut a send
// into datagrams of size bytes.
func udpSegment(size uint16) []byte {
	words := make([]uint64, (unix.CmsgSpace(2)+7)/8) // a Cmsghdr's alignment
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], size)
	return b
}
