package dhcpproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/siteboot/siteboot/internal/sockprio"
	"golang.org/x/sys/unix"
)

// Conn is one listening socket and what Handle needs to know about the
// packets that arrive on it.
type Conn struct {
	// PacketConn is the socket; Serve reads from it, writes replies through
	// it and closes it when it returns.
	PacketConn net.PacketConn
	// Iface is the interface the socket is bound to.
	Iface string
	// IP is the interface's IPv4 address (nil when it has none and
	// Config.AdvertiseIP stands in).
	IP net.IP
	// Net is the subnet of IP (the address with its prefix length); the
	// zero Prefix when unknown. See Arrival.Net.
	Net netip.Prefix
	// Port is the service: ServerPort or PXEPort.
	Port int
	// RcvBuf is the receive buffer the kernel granted Listen's socket
	// (SO_RCVBUF as read back); 0 for a socket Listen did not open.
	RcvBuf int
	// SndBuf is the send buffer it granted (SO_SNDBUF as read back): 16 MiB
	// with CAP_NET_ADMIN, else twice net.core.wmem_max at most; 0 for a
	// socket Listen did not open.
	SndBuf int
}

// Listen opens, for each interface of Config.Interfaces (or every up,
// non-loopback interface with an IPv4 address when that is empty), one
// socket on UDP 67 and one on UDP 4011, each bound to its device with
// SO_BINDTODEVICE (so the arrival interface is known and broadcasts leave
// through it), SO_REUSEADDR, SO_BROADCAST and a receive buffer of
// rcvBufWant (Conn.RcvBuf says what was granted). It needs CAP_NET_RAW and
// CAP_NET_BIND_SERVICE. On error nothing stays open.
func (s *Server) Listen(ctx context.Context) ([]*Conn, error) {
	ifaces, err := s.interfaces()
	if err != nil {
		return nil, err
	}
	var conns []*Conn
	for _, ifc := range ifaces {
		for _, port := range []int{ServerPort, PXEPort} {
			pc, rcvBuf, sndBuf, err := listenDevice(ctx, ifc.name, port)
			if err != nil {
				closeAll(conns)
				return nil, err
			}
			conns = append(conns, &Conn{PacketConn: pc, Iface: ifc.name, IP: ifc.ip, Net: ifc.net, Port: port, RcvBuf: rcvBuf, SndBuf: sndBuf})
		}
	}
	return conns, nil
}

type ifaceAddr struct {
	name string
	ip   net.IP
	net  netip.Prefix
}

// interfaces resolves the configured interfaces and their first IPv4
// address.
func (s *Server) interfaces() ([]ifaceAddr, error) {
	if len(s.cfg.Interfaces) == 0 {
		return allInterfaces()
	}
	out := make([]ifaceAddr, 0, len(s.cfg.Interfaces))
	for _, name := range s.cfg.Interfaces {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return nil, fmt.Errorf("dhcpproxy: interface %q: %w", name, err)
		}
		ip, subnet := firstIPv4(ifc)
		if ip == nil && s.cfg.AdvertiseIP == nil {
			return nil, fmt.Errorf("dhcpproxy: interface %q has no IPv4 address (set dhcp.advertise_ip to use it anyway)", name)
		}
		out = append(out, ifaceAddr{name: name, ip: ip, net: subnet})
	}
	return out, nil
}

// ErrNoInterfaces is Listen with no configured interfaces on a host that
// has no up, non-loopback interface with an IPv4 address.
var ErrNoInterfaces = errors.New("dhcpproxy: no up, non-loopback interface with an IPv4 address")

func allInterfaces() ([]ifaceAddr, error) {
	ifcs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("dhcpproxy: list interfaces: %w", err)
	}
	var out []ifaceAddr
	for i := range ifcs {
		ifc := &ifcs[i]
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		if ip, subnet := firstIPv4(ifc); ip != nil {
			out = append(out, ifaceAddr{name: ifc.Name, ip: ip, net: subnet})
		}
	}
	if len(out) == 0 {
		return nil, ErrNoInterfaces
	}
	return out, nil
}

// firstIPv4 returns the interface's first non-loopback IPv4 address and
// its subnet.
func firstIPv4(ifc *net.Interface) (net.IP, netip.Prefix) {
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, netip.Prefix{}
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip := n.IP.To4(); ip != nil && !ip.IsLoopback() {
			ones, bits := n.Mask.Size()
			if bits == 128 && ones >= 96 { // an IPv4 mask in 16-byte form
				ones, bits = ones-96, 32
			}
			if bits != 32 {
				return ip, netip.Prefix{}
			}
			return ip, netip.PrefixFrom(netip.AddrFrom4([4]byte(ip)), ones)
		}
	}
	return nil, netip.Prefix{}
}

// listenDevice binds 0.0.0.0:port on one device, and returns the receive
// and send buffers it was granted.
func listenDevice(ctx context.Context, iface string, port int) (net.PacketConn, int, int, error) {
	var rcvBuf, sndBuf int
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = setSockopts(int(fd), iface)
			if serr == nil {
				sndBuf = setSndBuf(int(fd))
				rcvBuf, serr = setRcvBuf(int(fd))
			}
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(ctx, "udp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
	if err != nil {
		return nil, 0, 0, fmt.Errorf("dhcpproxy: listen on %s port %d: %w", iface, port, err)
	}
	return pc, rcvBuf, sndBuf, nil
}

func setSockopts(fd int, iface string) error {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
		return fmt.Errorf("IP_PKTINFO: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("SO_REUSEADDR: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1); err != nil {
		return fmt.Errorf("SO_BROADCAST: %w", err)
	}
	if err := unix.BindToDevice(fd, iface); err != nil {
		return fmt.Errorf("SO_BINDTODEVICE %q: %w", iface, err)
	}
	// Answers go ahead of the interface's bulk streams (internal/sockprio).
	return sockprio.Set(fd, false, sockprio.NetworkControl)
}

func closeAll(conns []*Conn) {
	for _, c := range conns {
		c.PacketConn.Close()
	}
}
