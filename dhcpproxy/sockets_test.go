package dhcpproxy

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/siteboot/siteboot/internal/metrictest"
	"github.com/siteboot/siteboot/internal/netlab"
)

// rawFD runs f on uc's descriptor.
func rawFD(t *testing.T, uc *net.UDPConn, f func(fd int)) {
	t.Helper()
	rc, err := uc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Control(func(fd uintptr) { f(int(fd)) }); err != nil {
		t.Fatal(err)
	}
}

func loopbackUDP(t *testing.T) *net.UDPConn {
	t.Helper()
	uc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	return uc
}

// TestRcvBufGranted: the receive and send buffers Listen asks for are
// granted in full with privileges (SO_RCVBUFFORCE, SO_SNDBUFFORCE), and up
// to net.core.rmem_max and wmem_max without, all well above the default.
func TestRcvBufGranted(t *testing.T) {
	uc := loopbackUDP(t)
	var def, got int
	var err error
	rawFD(t, uc, func(fd int) {
		def, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
		got, err = setRcvBuf(fd)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := 2 * 212992 // twice the usual rmem_max: the least SO_RCVBUF gives
	if os.Geteuid() == 0 {
		want = rcvBufWant // SO_RCVBUFFORCE; the kernel reports twice it
	}
	if got < want || got <= def {
		t.Errorf("receive buffer granted %d bytes (default %d), want at least %d", got, def, want)
	}
	// The send buffer: the same rule, and never an error.
	var sdef, sgot int
	rawFD(t, uc, func(fd int) {
		sdef, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
		sgot = setSndBuf(fd)
	})
	want = 2 * 212992
	if os.Geteuid() == 0 {
		want = 2 * sndBufWant
	}
	if sgot < want || sgot <= sdef {
		t.Errorf("send buffer granted %d bytes (default %d), want at least %d", sgot, sdef, want)
	}
}

// TestSocketDropsCounted: datagrams the kernel drops on a served socket
// whose buffer is full show in siteboot_dhcp_socket_drops_total, and stay
// counted after the socket is retired.
func TestSocketDropsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, func(c *Config) { c.Registerer = reg })
	uc := loopbackUDP(t)
	rawFD(t, uc, func(fd int) {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4096); err != nil {
			t.Fatal(err)
		}
	})
	c := &Conn{PacketConn: uc, Iface: "lo", Port: PXEPort}
	f.srv.drops.serve([]*Conn{c}) // counted, but nobody reads it
	key := `siteboot_dhcp_socket_drops_total{iface="lo"}{port="4011"}`
	if got, ok := metrictest.Values(t, reg)[key]; !ok || got != 0 {
		t.Fatalf("%s = %v (present %v) before any packet, want 0", key, got, ok)
	}
	client := loopbackUDP(t)
	pkt := pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7)
	for range 200 {
		if _, err := client.WriteToUDP(pkt, uc.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
	}
	drops := metrictest.Values(t, reg)[key]
	if drops < 150 {
		t.Errorf("%s = %v after 200 datagrams into a 4 KiB buffer, want most of them", key, drops)
	}
	f.srv.drops.retire([]*Conn{c})
	uc.Close()
	if after := metrictest.Values(t, reg)[key]; after != drops {
		t.Errorf("%s = %v after the socket was retired, want %v", key, after, drops)
	}
}

// TestServeBurstNoDrops: a burst of DISCOVERs from 2,000 machines at once,
// sent without waiting, is answered in full on a socket with Listen's
// receive buffer: no drop, and every goroutine gone after Serve.
func TestServeBurstNoDrops(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, func(c *Config) { c.Registerer = reg; c.Entries = everyMAC{} })
	srv := loopbackUDP(t)
	client := loopbackUDP(t)
	for _, uc := range []*net.UDPConn{srv, client} {
		rawFD(t, uc, func(fd int) {
			if _, err := setRcvBuf(fd); err != nil {
				t.Fatal(err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- f.srv.Serve(ctx, &Conn{PacketConn: srv, Iface: "lo", IP: net.IPv4(127, 0, 0, 1), Port: PXEPort})
	}()
	const n = 2000
	to := srv.LocalAddr().(*net.UDPAddr)
	for i := range n {
		if _, err := client.WriteToUDP(pxeReq(t, stormMAC(i), dhcpv4.MessageTypeRequest, 7), to); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	buf := make([]byte, 2048)
	for got < n {
		if err := client.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := client.ReadFromUDP(buf); err != nil {
			break
		}
		got++
	}
	key := `siteboot_dhcp_socket_drops_total{iface="lo"}{port="4011"}`
	if drops := metrictest.Values(t, reg)[key]; got != n || drops != 0 {
		t.Errorf("%d of %d requests answered, %s = %v; want all, 0", got, n, key, drops)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSockoptsMarkAnswers: the sockets answers leave from carry DSCP CS6,
// as dnsmasq's do, and the interactive priority, so that the host's
// queueing discipline sends them ahead of bulk streams.
func TestSockoptsMarkAnswers(t *testing.T) {
	netlab.Require(t) // root: SO_BINDTODEVICE
	uc := loopbackUDP(t)
	var tos, prio int
	var err error
	rawFD(t, uc, func(fd int) {
		if err = setSockopts(fd, "lo"); err != nil {
			return
		}
		tos, _ = unix.GetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS)
		prio, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PRIORITY)
	})
	if err != nil {
		t.Fatal(err)
	}
	if tos != 0xc0 || prio != 6 {
		t.Errorf("IP_TOS %#x and SO_PRIORITY %d, want 0xc0 and 6", tos, prio)
	}
}
