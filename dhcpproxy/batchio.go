package dhcpproxy

import (
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A proxyDHCP server spends its time in system calls, not in decisions:
// with one recvmsg and one sendto per packet, a 10,000-entry server under
// a closed-loop DISCOVER load spent about 10 µs of its 35 µs per offer
// deciding and building the reply, the rest in the two calls, the Go
// runtime's bookkeeping around them, and its readers handing the
// socket's locks to each other. A batch reader takes all a socket has
// queued, up to batchSize datagrams, in one recvmmsg, and sends the
// replies to them in one sendmmsg. Under load a call moves many packets;
// with one packet queued it costs what recvmsg and sendto did.
//
// The calls are raw system calls, as the HTTP and TFTP servers' socket
// calls are: the socket is non-blocking, so neither can sleep (a read's
// EAGAIN waits in the network poller, as net.UDPConn's calls do), and the
// runtime's own calls would wake its monitor thread whenever every
// processor had been idle (see package tftpd, rawio.go).

// batchSize is the most datagrams one recvmmsg or sendmmsg moves: a
// closed-loop client with 32 requests outstanding is answered in one
// pair of calls. Each reader holds batchSize buffers of maxPacket.
const batchSize = 32

// batchCall is a raw system call. It is nosplit, as the syscall
// package's own calls are.
//
//go:nosplit
func batchCall(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, syscall.Errno) {
	r, _, e := syscall.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	return r, e
}

// mmsghdr is the kernel's struct mmsghdr: a msghdr and the bytes moved.
// Go pads it as C does (to 64 bytes on 64-bit, 32 on 32-bit).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// batchIO is one reader's buffers and headers for an IPv4 UDP socket:
// the datagrams read (with their source and IP_PKTINFO) and the replies
// to send. Made once per reader, it allocates nothing per batch.
type batchIO struct {
	rc syscall.RawConn

	in    [batchSize]mmsghdr
	inIov [batchSize]unix.Iovec
	bufs  [batchSize][]byte
	oobs  [batchSize][]byte
	from  [batchSize]unix.RawSockaddrInet4
	got   int // datagrams the last read returned
	rErr  syscall.Errno
	readF func(fd uintptr) bool

	out    [batchSize]mmsghdr
	outIov [batchSize]unix.Iovec
	to     [batchSize]unix.RawSockaddrInet4
	queued int // replies in out
	sent   int // of those, sent
	wErr   syscall.Errno
	sendF  func(fd uintptr) bool
}

// newBatchIO is a batchIO on c's socket; nil when c is not an IPv4 UDP
// socket with a descriptor (packetReader serves it then).
func newBatchIO(c *Conn) *batchIO {
	uc, ok := c.PacketConn.(*net.UDPConn)
	if !ok {
		return nil
	}
	if la, ok := uc.LocalAddr().(*net.UDPAddr); !ok || la.IP.To4() == nil {
		return nil
	}
	rc, err := uc.SyscallConn()
	if err != nil || enablePktinfo(uc) != nil {
		return nil
	}
	family := -1
	if err := rc.Control(func(fd uintptr) {
		family, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
	}); err != nil || family != unix.AF_INET {
		return nil
	}
	b := &batchIO{rc: rc}
	oobLen := unix.CmsgSpace(unix.SizeofInet4Pktinfo)
	for i := range b.in {
		b.bufs[i] = make([]byte, maxPacket)
		b.oobs[i] = make([]byte, oobLen)
		b.inIov[i].Base = &b.bufs[i][0]
		b.inIov[i].SetLen(maxPacket)
		h := &b.in[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&b.from[i]))
		h.Iov = &b.inIov[i]
		h.SetIovlen(1)
		h.Control = &b.oobs[i][0]
		h.SetControllen(oobLen)
		o := &b.out[i].hdr
		o.Name = (*byte)(unsafe.Pointer(&b.to[i]))
		o.Namelen = unix.SizeofSockaddrInet4
		o.Iov = &b.outIov[i]
		o.SetIovlen(1)
	}
	b.readF = b.readStep
	b.sendF = b.sendStep
	return b
}

// read waits for datagrams and reads up to batchSize of them; n is how
// many, each then at packet(i).
func (b *batchIO) read() (n int, err error) {
	b.got, b.rErr = 0, 0
	if err := b.rc.Read(b.readF); err != nil {
		return 0, err // net.ErrClosed once the socket is closed
	}
	if b.rErr != 0 {
		return 0, os.NewSyscallError("recvmmsg", b.rErr)
	}
	return b.got, nil
}

func (b *batchIO) readStep(fd uintptr) bool {
	for i := range b.in {
		// The kernel writes back the lengths: give each its room again.
		b.in[i].hdr.Namelen = unix.SizeofSockaddrInet4
		b.in[i].hdr.SetControllen(len(b.oobs[i]))
		b.in[i].hdr.Flags = 0
	}
	for {
		r, e := batchCall(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.in[0])), batchSize, unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			b.got = int(r)
			return true
		case unix.EAGAIN:
			return false
		case unix.EINTR:
		default:
			b.rErr = e
			return true
		}
	}
}

// packet is datagram i of the last read, valid until the next read, and
// how it arrived on c. A datagram longer than maxPacket comes back empty,
// so that it is decided as malformed: its first maxPacket bytes are not
// what its sender sent.
func (b *batchIO) packet(i int, c *Conn) ([]byte, Arrival) {
	in := Arrival{Iface: c.Iface, ServerIP: c.IP, Port: c.Port, Net: c.Net}
	m := &b.in[i]
	if m.hdr.Namelen >= unix.SizeofSockaddrInet4 && b.from[i].Family == unix.AF_INET {
		p := (*[2]byte)(unsafe.Pointer(&b.from[i].Port))
		in.Source = net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4(b.from[i].Addr), uint16(p[0])<<8|uint16(p[1])))
	}
	in.Dst = pktinfoDst(b.oobs[i][:min(uint64(m.hdr.Controllen), uint64(len(b.oobs[i])))])
	if m.hdr.Flags&unix.MSG_TRUNC != 0 {
		return b.bufs[i][:0], in
	}
	return b.bufs[i][:min(int(m.n), len(b.bufs[i]))], in
}

// queue adds a reply to the next send; false when to is not an IPv4
// address (it is not queued).
func (b *batchIO) queue(reply []byte, to *net.UDPAddr) bool {
	ip := to.IP.To4()
	if ip == nil || len(reply) == 0 || b.queued == batchSize {
		return false
	}
	i := b.queued
	sa := &b.to[i]
	sa.Family = unix.AF_INET
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(to.Port>>8), byte(to.Port)
	copy(sa.Addr[:], ip)
	b.outIov[i].Base = &reply[0]
	b.outIov[i].SetLen(len(reply))
	b.queued++
	return true
}

// send sends the queued replies. It never waits for room in the socket's
// send buffer: the reader must go on reading, or a full buffer would stop
// every answer on the socket. A stranger can fill it: replies to on-link
// addresses that nobody answers ARP for wait in the neighbour queue,
// counted against the socket, for seconds. A reply the kernel refuses is
// skipped, and on a full buffer the rest of the batch is dropped; each
// goes to failed with its index and the error, and the client asks again.
func (b *batchIO) send(failed func(i int, err error)) error {
	defer func() {
		for i := range b.queued {
			b.outIov[i].Base = nil // let the replies go
		}
		b.queued, b.sent = 0, 0
	}()
	for b.sent < b.queued {
		b.wErr = 0
		if err := b.rc.Write(b.sendF); err != nil {
			return err
		}
		switch b.wErr {
		case 0:
		case unix.EAGAIN:
			err := os.NewSyscallError("sendmmsg", b.wErr)
			for ; b.sent < b.queued; b.sent++ {
				failed(b.sent, err)
			}
		default:
			// The first unsent reply failed on its own (an unreachable
			// or refused destination): report it, go on after it.
			failed(b.sent, os.NewSyscallError("sendmmsg", b.wErr))
			b.sent++
		}
	}
	return nil
}

func (b *batchIO) sendStep(fd uintptr) bool {
	for b.sent < b.queued {
		r, e := batchCall(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.out[b.sent])), uintptr(b.queued-b.sent), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			if r == 0 { // never for vlen >= 1; must not spin
				b.wErr = unix.EAGAIN
				return true
			}
			b.sent += int(r)
		case unix.EINTR:
		default: // EAGAIN too: send does not wait
			b.wErr = e
			return true
		}
	}
	return true
}
