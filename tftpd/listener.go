package tftpd

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/siteboot/siteboot/internal/ipv4host"
)

// listener is the listening socket with the arrival address and
// interface of each datagram (IP_PKTINFO / IPV6_RECVPKTINFO), which pick
// the source address of the answers and the MTU that caps blksize.
type listener struct {
	udp *net.UDPConn
	v4  *ipv4.PacketConn // one of v4 and v6 is set
	v6  *ipv6.PacketConn
	// info is false when the kernel refused packet info: then every answer
	// comes from the routing table's choice and blocks are 512 bytes.
	info bool
}

func newListener(conn *net.UDPConn) *listener {
	l := &listener{udp: conn}
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() == nil {
		l.v6 = ipv6.NewPacketConn(conn)
		l.info = l.v6.SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true) == nil
		return l
	}
	l.v4 = ipv4.NewPacketConn(conn)
	l.info = l.v4.SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true) == nil
	return l
}

// transferNetwork is what the socket of a transfer to client listens on.
func transferNetwork(client *net.UDPAddr) string {
	if client.IP.To4() != nil {
		return "udp4"
	}
	return "udp6"
}

func (l *listener) read(buf []byte) (datagram, error) {
	var d datagram
	var src net.Addr
	var err error
	if l.v6 != nil {
		var cm *ipv6.ControlMessage
		d.n, cm, src, err = l.v6.ReadFrom(buf)
		if cm != nil {
			d.dst, d.ifIndex = cm.Dst, cm.IfIndex
		}
	} else {
		var cm *ipv4.ControlMessage
		d.n, cm, src, err = l.v4.ReadFrom(buf)
		if cm != nil {
			d.dst, d.ifIndex = cm.Dst, cm.IfIndex
		}
	}
	if err != nil {
		return d, err
	}
	d.src, _ = src.(*net.UDPAddr)
	if d.src == nil {
		return d, net.UnknownNetworkError("datagram without a UDP source")
	}
	ap := d.src.AddrPort()
	d.client = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	return d, nil
}

// reply sends p to the sender of d from the address d was sent to.
func (l *listener) reply(p []byte, d datagram) error {
	src := replySource(d.dst)
	var err error
	if l.v6 != nil {
		var cm *ipv6.ControlMessage
		if src != nil {
			cm = &ipv6.ControlMessage{Src: src}
		}
		_, err = l.v6.WriteTo(p, cm, d.src)
	} else {
		var cm *ipv4.ControlMessage
		if src != nil {
			cm = &ipv4.ControlMessage{Src: src}
		}
		_, err = l.v4.WriteTo(p, cm, d.src)
	}
	return err
}

// hostSource reports whether d's source is one host that may be answered:
// a port, and an address that is not unspecified, multicast, the limited
// broadcast, nor the network or directed-broadcast address of an IPv4
// prefix of the interface d arrived on or of any other local interface
// (ipv4host.Is). Linux accepts a datagram from a local subnet's broadcast
// address where reverse-path filtering is off (its default), also on an
// interface other than that subnet's, and a host of that link that forged
// it sees the answers, the OACK's port among them, and can drive the
// transfer. The transfer sockets also refuse to send to a broadcast
// address (setOptions); this check keeps such a request from taking a
// place, an ERROR or a log line at all. A remote subnet's broadcast
// address cannot be told from a host's here, and routers do not forward
// directed broadcasts by default.
func (s *Server) hostSource(d datagram) bool {
	a := d.client.Addr()
	if d.client.Port() == 0 || !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
		return false
	}
	if !a.Is4() {
		return true
	}
	info, _ := s.ifaces.get(d.ifIndex)
	for _, nets := range [2][]netip.Prefix{info.nets, s.ifaces.allNets()} {
		for _, p := range nets {
			if !ipv4host.Is(a, p) {
				return false
			}
		}
	}
	return ipv4host.Is(a, netip.Prefix{})
}

// replySource is the address answers to a datagram sent to dst come
// from: dst itself, or the kernel's choice (nil) when dst is unknown,
// broadcast or multicast.
func replySource(dst net.IP) net.IP {
	if dst == nil || dst.IsUnspecified() || dst.IsMulticast() || dst.Equal(net.IPv4bcast) {
		return nil
	}
	return dst
}

// ifaceCache remembers interface MTUs and names, and the host's IPv4
// prefixes, for a while: looking one up costs a netlink dump, too much to
// do per request.
type ifaceCache struct {
	now       func() time.Time
	listAddrs func() ([]net.Addr, error) // every interface's addresses: net.InterfaceAddrs

	mu    sync.Mutex
	m     map[int]ifaceInfo
	all   []netip.Prefix // every interface's IPv4 prefixes (hostSource)
	allAt time.Time
}

type ifaceInfo struct {
	mtu  int
	name string
	nets []netip.Prefix // its IPv4 prefixes (hostSource)
	at   time.Time
}

// ipv4Prefixes are the IPv4 prefixes among addrs.
func ipv4Prefixes(addrs []net.Addr) []netip.Prefix {
	var nets []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil {
			continue
		}
		ones, bits := n.Mask.Size()
		if bits == 128 { // a v4 address with a 16-byte mask
			ones -= 96
		}
		if bits == 0 || ones < 0 {
			continue
		}
		nets = append(nets, netip.PrefixFrom(netip.AddrFrom4([4]byte(n.IP.To4())), ones))
	}
	return nets
}

// allNets returns the IPv4 prefixes of every local interface, listed at
// most once per ifaceTTL; the last list (none at first) while they cannot
// be listed.
func (c *ifaceCache) allNets() []netip.Prefix {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.allAt.IsZero() && now.Sub(c.allAt) < ifaceTTL && !now.Before(c.allAt) {
		return c.all
	}
	c.allAt = now
	if addrs, err := c.listAddrs(); err == nil {
		c.all = ipv4Prefixes(addrs)
	}
	return c.all
}

// ifaceTTL is how long a looked-up MTU is used.
const ifaceTTL = 10 * time.Second

func newIfaceCache(now func() time.Time) *ifaceCache {
	return &ifaceCache{now: now, listAddrs: net.InterfaceAddrs, m: map[int]ifaceInfo{}}
}

// get returns the interface with this index; ok is false when it is
// unknown.
func (c *ifaceCache) get(index int) (ifaceInfo, bool) {
	if index <= 0 {
		return ifaceInfo{}, false
	}
	now := c.now()
	c.mu.Lock()
	info, ok := c.m[index]
	c.mu.Unlock()
	if ok && now.Sub(info.at) < ifaceTTL {
		return info, true
	}
	ifi, err := net.InterfaceByIndex(index)
	if err != nil {
		return ifaceInfo{}, false
	}
	addrs, _ := ifi.Addrs()
	info = ifaceInfo{mtu: ifi.MTU, name: ifi.Name, nets: ipv4Prefixes(addrs), at: now}
	c.mu.Lock()
	c.m[index] = info
	c.mu.Unlock()
	return info, true
}
