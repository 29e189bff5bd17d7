package dhcpproxy

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// A storm's DISCOVERs arrive as a burst of broadcasts. One reader on a
// default receive buffer (about 200 KiB, a few hundred packets) dropped
// 62–218 of them per 1,000-machine storm (issue 15), so every socket gets
// a larger buffer, and is read in batches (batchio.go).
const (
	// rcvBufWant is the receive buffer asked for: about 6,000 DISCOVERs
	// queued (each costs its ~2.3 KiB skb truesize, not its 300 bytes).
	// SO_RCVBUFFORCE gets it when the process has CAP_NET_ADMIN; otherwise
	// SO_RCVBUF gets at most net.core.rmem_max.
	rcvBufWant = 8 << 20
)

// readersPerConn is how many goroutines read a socket that batchIO cannot
// read (not IPv4 UDP), each deciding and answering the packet it read
// before it reads again, so a slow decision (a log write, a lease check) or
// a blocked write never leaves the queue unread while another core is
// free. They share the socket, not
// SO_REUSEPORT sockets: Linux delivers a broadcast to every socket of a
// reuseport group (it load-balances only unicast), so N sockets would
// answer each DISCOVER N times. Bounded: 2× GOMAXPROCS (which siteboot
// serve sets to 2× the CPUs, so 4 per CPU; measured so in the storm), 4 to 16.
func readersPerConn() int {
	return min(max(2*runtime.GOMAXPROCS(0), 4), 16)
}

// sndBufWant is the send buffer asked for. Replies to an on-link address
// wait in its ARP queue until it answers, or for seconds if it never
// does, and stay counted against the socket meanwhile: with the default
// buffer (about 200 KiB, the size of one such queue) two addresses nobody
// answers for filled it. The reader never waits for room (batchIO.send),
// so a full buffer drops replies, counted in send_errors_total; a larger
// one makes a stranger need more such addresses to get there.
// SO_SNDBUFFORCE needs CAP_NET_ADMIN; without it SO_SNDBUF gets at most
// net.core.wmem_max.
const sndBufWant = 8 << 20

// setSndBuf asks for sndBufWant bytes of send buffer on fd and returns
// what the kernel granted (doubled, as SO_SNDBUF reads back); 0 when it
// cannot tell. A refusal is no reason not to listen: the socket keeps the
// buffer it has.
func setSndBuf(fd int) int {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndBufWant) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sndBufWant)
	}
	got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	if err != nil {
		return 0
	}
	return got
}

// setRcvBuf asks for rcvBufWant bytes of receive buffer on fd and returns
// what the kernel granted (SO_RCVBUF reads back the doubled value it
// accounts with).
func setRcvBuf(fd int) (int, error) {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBufWant); err != nil {
		if !errors.Is(err, unix.EPERM) {
			return 0, fmt.Errorf("SO_RCVBUFFORCE: %w", err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBufWant); err != nil {
			return 0, fmt.Errorf("SO_RCVBUF: %w", err)
		}
	}
	got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		return 0, fmt.Errorf("SO_RCVBUF: %w", err)
	}
	return got, nil
}

// socketDrops reads the kernel's count of datagrams fd dropped (sk_drops:
// receive buffer full, the same number as the drops column of
// /proc/net/udp) with SO_MEMINFO, at the cost of one getsockopt when the
// metric is scraped, nothing per packet.
func socketDrops(fd int) (uint64, error) {
	var mem [unix.SK_MEMINFO_VARS]uint32
	l := uint32(unsafe.Sizeof(mem))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	return uint64(mem[unix.SK_MEMINFO_DROPS]), nil
}

// connDrops is socketDrops for a Conn's socket; ok=false when it is no
// UDP socket or is closed.
func connDrops(c *Conn) (n uint64, ok bool) {
	uc, isUDP := c.PacketConn.(*net.UDPConn)
	if !isUDP {
		return 0, false
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var derr error
	if err := rc.Control(func(fd uintptr) { n, derr = socketDrops(int(fd)) }); err != nil || derr != nil {
		return 0, false
	}
	return n, true
}

// dropCollector is siteboot_dhcp_socket_drops_total: the kernel's drops of
// the sockets being served, per interface and port, plus those of sockets
// served before (read as they were retired, so the counter never falls).
type dropCollector struct {
	desc *prometheus.Desc

	mu   sync.Mutex
	live map[*Conn]struct{}
	base map[sockKey]uint64
}

type sockKey struct {
	iface string
	port  int
}

func newDropCollector() *dropCollector {
	return &dropCollector{
		desc: prometheus.NewDesc("siteboot_dhcp_socket_drops_total",
			"Datagrams the kernel dropped on the proxyDHCP sockets before they were read (receive buffer full; SO_MEMINFO drops, the drops column of /proc/net/udp).",
			[]string{"iface", "port"}, nil),
		live: map[*Conn]struct{}{},
		base: map[sockKey]uint64{},
	}
}

func (d *dropCollector) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d *dropCollector) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	sum := make(map[sockKey]uint64, len(d.base)+len(d.live))
	for k, n := range d.base {
		sum[k] = n
	}
	for c := range d.live {
		if n, ok := connDrops(c); ok {
			sum[sockKey{c.Iface, c.Port}] += n
		}
	}
	d.mu.Unlock()
	for k, n := range sum {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(n), k.iface, strconv.Itoa(k.port))
	}
}

// serve starts counting conns' drops.
func (d *dropCollector) serve(conns []*Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range conns {
		d.live[c] = struct{}{}
		k := sockKey{c.Iface, c.Port}
		d.base[k] += 0 // the series exists from the start, at 0
	}
}

// retire keeps conns' last drop counts before they are closed.
func (d *dropCollector) retire(conns []*Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range conns {
		if _, ok := d.live[c]; !ok {
			continue
		}
		delete(d.live, c)
		if n, ok := connDrops(c); ok {
			d.base[sockKey{c.Iface, c.Port}] += n
		}
	}
}
