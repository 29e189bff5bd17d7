package dhcpproxy

import (
	"encoding/binary"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// packetReader reads datagrams from a Conn together with their destination
// address, which the kernel reports in an IP_PKTINFO control message on a
// UDP socket that asked for it. The buffers are reused: one read allocates
// only the source address.
type packetReader struct {
	c   *Conn
	udp *net.UDPConn // nil when c's socket is no UDP socket: no destination then
	buf []byte
	oob []byte
}

func newPacketReader(c *Conn) *packetReader {
	r := &packetReader{c: c, buf: make([]byte, maxPacket)}
	if uc, ok := c.PacketConn.(*net.UDPConn); ok && enablePktinfo(uc) == nil {
		r.udp = uc
		r.oob = make([]byte, unix.CmsgSpace(unix.SizeofInet4Pktinfo))
	}
	return r
}

// enablePktinfo sets IP_PKTINFO (Listen's sockets have it already; a
// socket handed to Serve by a caller may not).
func enablePktinfo(uc *net.UDPConn) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
	}); err != nil {
		return err
	}
	return serr
}

// read returns the next datagram (valid until the next read) and how it
// arrived.
func (r *packetReader) read() ([]byte, Arrival, error) {
	in := Arrival{Iface: r.c.Iface, ServerIP: r.c.IP, Port: r.c.Port, Net: r.c.Net}
	if r.udp == nil {
		n, src, err := r.c.PacketConn.ReadFrom(r.buf)
		in.Source, _ = src.(*net.UDPAddr)
		return r.buf[:n], in, err
	}
	n, oobn, _, src, err := r.udp.ReadMsgUDPAddrPort(r.buf, r.oob)
	if err != nil {
		return nil, in, err
	}
	in.Source = net.UDPAddrFromAddrPort(netip.AddrPortFrom(src.Addr().Unmap(), src.Port()))
	in.Dst = pktinfoDst(r.oob[:oobn])
	return r.buf[:n], in, nil
}

// pktinfoDst returns ipi_addr, the header destination address, of the
// IP_PKTINFO message among control messages oob; the zero Addr when there
// is none.
func pktinfoDst(oob []byte) netip.Addr {
	const levelOff = unix.SizeofCmsghdr - 8 // Len is the word before Level and Type
	for len(oob) >= unix.SizeofCmsghdr {
		var l uint64
		if levelOff == 8 {
			l = binary.NativeEndian.Uint64(oob)
		} else {
			l = uint64(binary.NativeEndian.Uint32(oob))
		}
		level := int32(binary.NativeEndian.Uint32(oob[levelOff:]))
		typ := int32(binary.NativeEndian.Uint32(oob[levelOff+4:]))
		if l < unix.SizeofCmsghdr || l > uint64(len(oob)) {
			return netip.Addr{}
		}
		data := oob[unix.CmsgLen(0):l]
		if level == unix.IPPROTO_IP && typ == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo {
			return netip.AddrFrom4([4]byte(data[8:12])) // after ipi_ifindex and ipi_spec_dst
		}
		next := unix.CmsgSpace(int(l) - unix.CmsgLen(0))
		if next > len(oob) {
			return netip.Addr{}
		}
		oob = oob[next:]
	}
	return netip.Addr{}
}
