package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/siteboot/siteboot/bench/internal/pxe"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// dhcpMux shares one DHCP client socket among all machines: firmware of
// many machines on one LAN all listen on UDP 68 and tell their replies
// apart by xid and chaddr, and so does this. A second socket, on 4011,
// is where firmware's requests to a proxy's or boot server's port 4011 go
// from and are answered to, as edk2 binds that port for them; replies on
// either socket go to the machine that waits on their xid.
type dhcpMux struct {
	conn    *ipv4.PacketConn // UDP 68
	pxeConn *ipv4.PacketConn // UDP 4011; nil: requests go from conn
	target  net.Addr         // where DISCOVERs go

	mu      sync.Mutex
	waiters map[uint32]waiter
	local   map[netip.Addr]netip.Addr // by server: the address the kernel sends to it from

	sent, retransmits, replies     atomic.Uint64
	requests                       atomic.Uint64
	malformed, unmatched, wrongMAC atomic.Uint64
	dropped, readErrors            atomic.Uint64
	sendErrors                     atomic.Uint64
	stopping                       atomic.Bool
	done                           sync.WaitGroup
}

type waiter struct {
	mac [6]byte
	ch  chan pxe.Reply
}

// DHCPStats is what the shared sockets saw.
type DHCPStats struct {
	Sent        uint64 `json:"sent"`
	Retransmits uint64 `json:"retransmits"`
	Requests    uint64 `json:"requests"` // of Sent, requests to a port 4011, retransmits included
	Replies     uint64 `json:"replies"`
	Malformed   uint64 `json:"malformed"`
	Unmatched   uint64 `json:"unmatched"` // no machine waits on that xid (late or duplicate answers)
	WrongMAC    uint64 `json:"wrong_mac"`
	Dropped     uint64 `json:"dropped"` // a machine's queue was full
	SendErrors  uint64 `json:"send_errors"`
	ReadErrors  uint64 `json:"read_errors"`
}

// newDHCPMux receives on conn and, when it is not nil, pxeConn.
func newDHCPMux(conn, pxeConn net.PacketConn, target net.Addr) *dhcpMux {
	m := &dhcpMux{conn: ipv4.NewPacketConn(conn), target: target, waiters: make(map[uint32]waiter),
		local: make(map[netip.Addr]netip.Addr)}
	m.done.Go(func() { m.receive(m.conn, conn) })
	if pxeConn != nil {
		m.pxeConn = ipv4.NewPacketConn(pxeConn)
		m.done.Go(func() { m.receive(m.pxeConn, pxeConn) })
	}
	return m
}

// close stops the receivers; the caller closes the sockets afterwards.
func (m *dhcpMux) close() {
	m.stopping.Store(true)
	_ = m.conn.SetReadDeadline(time.Now())
	if m.pxeConn != nil {
		_ = m.pxeConn.SetReadDeadline(time.Now())
	}
	m.done.Wait()
}

func (m *dhcpMux) stats() DHCPStats {
	return DHCPStats{Sent: m.sent.Load(), Retransmits: m.retransmits.Load(), Requests: m.requests.Load(), Replies: m.replies.Load(),
		Malformed: m.malformed.Load(), Unmatched: m.unmatched.Load(), WrongMAC: m.wrongMAC.Load(),
		Dropped: m.dropped.Load(), SendErrors: m.sendErrors.Load(), ReadErrors: m.readErrors.Load()}
}

// receive delivers what conn receives, each reply stamped with when the
// kernel received it (SO_TIMESTAMPNS): a step ends when its answer
// reaches the machine's NIC, not when this generator's scheduler gets to
// the goroutine that reads it.
func (m *dhcpMux) receive(conn *ipv4.PacketConn, raw net.PacketConn) {
	buf, oob := make([]byte, 2048), make([]byte, 128)
	uc, _ := raw.(*net.UDPConn)
	stamped := uc != nil && setTimestamps(uc) == nil
	for {
		var n int
		var err error
		var at time.Time
		if stamped {
			var oobn int
			n, oobn, _, _, err = uc.ReadMsgUDP(buf, oob)
			at = kernelTime(oob[:oobn])
		} else {
			n, _, _, err = conn.ReadFrom(buf)
		}
		if at.IsZero() {
			at = time.Now()
		}
		switch {
		case err == nil:
			m.deliver(buf[:n], at)
		case errors.Is(err, net.ErrClosed):
			return
		case errors.Is(err, os.ErrDeadlineExceeded) && m.stopping.Load():
			return
		default:
			m.readErrors.Add(1)
		}
	}
}

// setTimestamps asks the kernel for SO_TIMESTAMPNS on uc.
func setTimestamps(uc *net.UDPConn) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// kernelTime is the SCM_TIMESTAMPNS in oob, zero when there is none.
func kernelTime(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}
	}
	for _, c := range msgs {
		if c.Header.Level == unix.SOL_SOCKET && c.Header.Type == unix.SCM_TIMESTAMPNS && len(c.Data) >= 16 {
			ts := *(*unix.Timespec)(unsafe.Pointer(&c.Data[0]))
			return time.Unix(ts.Unix())
		}
	}
	return time.Time{}
}

func (m *dhcpMux) deliver(pkt []byte, at time.Time) {
	rep, err := pxe.ParseReply(pkt)
	if err != nil {
		m.malformed.Add(1)
		return
	}
	rep.Arrived = at
	m.replies.Add(1)
	m.mu.Lock()
	w, ok := m.waiters[rep.XID]
	m.mu.Unlock()
	switch {
	case !ok:
		m.unmatched.Add(1)
	case w.mac != rep.CHAddr:
		m.wrongMAC.Add(1)
	default:
		select {
		case w.ch <- rep:
		default:
			m.dropped.Add(1)
		}
	}
}

// errNoOffer is a DISCOVER exchange that ran out of retransmits, and
// errNoAck a request to a port 4011 that did.
var (
	errNoOffer = errors.New("no proxy offer")
	errNoAck   = errors.New("no ACK")
)

// dhcpTx is one exchange of a machine: a packet sent and sent again after
// each timeout until a reply is accepted.
type dhcpTx struct {
	pkt      []byte // with xid in place
	xid      uint32
	mac      [6]byte
	dst      net.Addr   // nil: the -dhcp-server target
	src      netip.Addr // the source address to send from; invalid: the kernel's choice
	request  bool       // a request to a port 4011 (counted apart)
	fromPXE  bool       // from the 4011 socket, when there is one (edk2)
	timeouts []time.Duration
	accept   func(pxe.Reply) bool
	// what names the sends in the error ("DISCOVERs"), noReply is the
	// error it wraps, and ignored names the replies accept refused.
	what, ignored string
	noReply       error
}

// exchange runs tx, as firmware does: it sends, waits the next timeout,
// sends again, until accept takes a reply or the timeouts run out. It
// returns the reply and the retransmits it needed.
func (m *dhcpMux) exchange(ctx context.Context, tx dhcpTx) (pxe.Reply, int, error) {
	ch := make(chan pxe.Reply, 8)
	m.mu.Lock()
	if _, dup := m.waiters[tx.xid]; dup {
		m.mu.Unlock()
		return pxe.Reply{}, 0, fmt.Errorf("xid %08x already in use", tx.xid)
	}
	m.waiters[tx.xid] = waiter{mac: tx.mac, ch: ch}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.waiters, tx.xid)
		m.mu.Unlock()
	}()
	conn, dst := m.conn, tx.dst
	if tx.fromPXE && m.pxeConn != nil {
		conn = m.pxeConn
	}
	if dst == nil {
		dst = m.target
	}
	var cm *ipv4.ControlMessage
	if tx.src.IsValid() {
		cm = &ipv4.ControlMessage{Src: tx.src.AsSlice()}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var others int
	for try, d := range tx.timeouts {
		if _, err := conn.WriteTo(tx.pkt, cm, dst); err != nil {
			m.sendErrors.Add(1)
			return pxe.Reply{}, try, fmt.Errorf("send to %s: %w", dst, err)
		}
		m.sent.Add(1)
		if tx.request {
			m.requests.Add(1)
		}
		if try > 0 {
			m.retransmits.Add(1)
		}
		timer.Reset(d)
	wait:
		for {
			select {
			case rep := <-ch:
				if tx.accept(rep) {
					return rep, try, nil
				}
				others++
			case <-timer.C:
				break wait
			case <-ctx.Done():
				return pxe.Reply{}, try, ctx.Err()
			}
		}
	}
	total := time.Duration(0)
	for _, d := range tx.timeouts {
		total += d
	}
	ignored := tx.ignored
	if ignored == "" {
		ignored = "other replies"
	}
	return pxe.Reply{}, len(tx.timeouts) - 1, fmt.Errorf("%w after %d %s in %v (%d %s)", tx.noReply, len(tx.timeouts), tx.what, total, others, ignored)
}

// localAddr is the address the kernel sends to server from: the own
// address of a machine without one of -src-ips, which its requests
// name as ciaddr. It is looked up once per server.
func (m *dhcpMux) localAddr(server netip.Addr) (netip.Addr, error) {
	m.mu.Lock()
	a, ok := m.local[server]
	m.mu.Unlock()
	if ok {
		return a, nil
	}
	// A UDP "connection" sends nothing; it only asks for the route.
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(server, pxe.PXEPort)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %s: %w", server, err)
	}
	a = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	_ = c.Close()
	m.mu.Lock()
	m.local[server] = a
	m.mu.Unlock()
	return a, nil
}
