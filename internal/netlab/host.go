package netlab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
)

// Host is a namespace on the lab's LAN, with eth0 on the bridge.
type Host struct {
	lab  *Lab
	name string
	ns   string
	addr netip.Addr
	mac  net.HardwareAddr
}

// Iface is the name of every host's LAN interface.
const Iface = "eth0"

var hostName = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)

// AddHost creates host namespace <id>-<name>, joins it to the bridge and
// gives eth0 the next free address of the subnet (.2, .3, …; .100-.199 are
// left to DHCP pools). It fails the test on error.
func (l *Lab) AddHost(name string) *Host {
	l.t.Helper()
	h, err := l.addHost(name)
	if err != nil {
		l.t.Fatalf("netlab: add host %q: %v", name, err)
	}
	return h
}

func (l *Lab) addHost(name string) (*Host, error) {
	if !hostName.MatchString(name) {
		return nil, fmt.Errorf("host name %q: want [a-z][a-z0-9]{0,11}", name)
	}
	l.mu.Lock()
	idx := len(l.hosts) + 1
	if idx+1 >= 100 {
		l.mu.Unlock()
		return nil, fmt.Errorf("too many hosts (%d)", idx)
	}
	h := &Host{lab: l, name: name, ns: l.id + "-" + name, addr: l.Addr(idx + 1)}
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	if err := l.addNamespace(h.ns); err != nil {
		return nil, err
	}
	port := "h" + strconv.Itoa(idx)
	err := l.ipBatch(l.SwitchNS(),
		[]string{"link", "add", port, "type", "veth", "peer", "name", Iface, "netns", h.ns},
		[]string{"link", "set", port, "master", bridge, "up"},
	)
	if err != nil {
		return nil, err
	}
	err = l.ipBatch(h.ns,
		[]string{"addr", "add", netip.PrefixFrom(h.addr, 24).String(), "dev", Iface},
		[]string{"link", "set", Iface, "up"},
		[]string{"route", "add", "255.255.255.255/32", "dev", Iface},
	)
	if err != nil {
		return nil, err
	}
	return h, h.readMAC()
}

func (h *Host) readMAC() error {
	return h.Do(func() error {
		ifc, err := net.InterfaceByName(Iface)
		if err != nil {
			return fmt.Errorf("read mac: %w", err)
		}
		h.mac = ifc.HardwareAddr
		return nil
	})
}

// Name is the host's short name, as given to AddHost.
func (h *Host) Name() string { return h.name }

// NS is the host's namespace name.
func (h *Host) NS() string { return h.ns }

// Addr is the host's address on eth0.
func (h *Host) Addr() netip.Addr { return h.addr }

// MAC is the hardware address of the host's eth0.
func (h *Host) MAC() net.HardwareAddr { return h.mac }

// Lab is the lab the host belongs to.
func (h *Host) Lab() *Lab { return h.lab }

// Listen opens a TCP (or unix) listener inside the host's namespace.
func (h *Host) Listen(ctx context.Context, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := h.Do(func() error {
		var err error
		ln, err = (&net.ListenConfig{}).Listen(ctx, network, addr)
		return err
	})
	return ln, err
}

// ListenPacket opens a UDP socket inside the host's namespace; lc may set
// socket options through its Control hook (nil for none).
func (h *Host) ListenPacket(ctx context.Context, lc *net.ListenConfig, network, addr string) (net.PacketConn, error) {
	if lc == nil {
		lc = &net.ListenConfig{}
	}
	var pc net.PacketConn
	err := h.Do(func() error {
		var err error
		pc, err = lc.ListenPacket(ctx, network, addr)
		return err
	})
	return pc, err
}
