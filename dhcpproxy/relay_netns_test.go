package dhcpproxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	dto "github.com/prometheus/client_model/go"
)

// TestRelayRulesNetns runs the server on real ports in the namespace lab
// (see newNetnsLab) with dhcp.relays = 10.231.1.3/32, an address c1 also
// holds: a broadcast that names a directed broadcast or another host as
// giaddr gets nothing, and a configured relay is answered at its giaddr
// even when it sends from another address.
func TestRelayRulesNetns(t *testing.T) {
	lab := newNetnsLab(t)
	if err := ipCmd("-n", lab.c1, "addr", "add", "10.231.1.3/24", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *Config) { c.Relays = []netip.Prefix{netip.MustParsePrefix("10.231.1.3/32")} })
	stop := serveInNetns(t, lab.srv, f)
	defer stop()
	open := func(ns, dev, addr string) *net.UDPConn {
		t.Helper()
		var c *net.UDPConn
		if err := inNetns(ns, func() (err error) { c, err = clientSocket(dev, addr); return err }); err != nil {
			t.Fatalf("socket %s in %s: %v", addr, ns, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	bcast1, relay1, relay3 := open(lab.c1, "eth0", "0.0.0.0:68"), open(lab.c1, "", "10.231.1.2:67"), open(lab.c1, "", "10.231.1.3:67")
	bcast2, listen2 := open(lab.c2, "eth0", "0.0.0.0:68"), open(lab.c2, "eth0", "0.0.0.0:67")

	t.Run("directed broadcast giaddr gets nothing", func(t *testing.T) {
		send(t, bcast2, pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, xid(0x21), withGiaddr("10.231.2.255", 1)), bcast67)
		waitIgnored(t, f, 1)
		expectSilence(t, listen2)
	})
	t.Run("a broadcast naming another host as giaddr gets nothing", func(t *testing.T) {
		send(t, bcast1, pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, xid(0x22), withGiaddr("10.231.1.2", 1)), bcast67)
		waitIgnored(t, f, 2)
		expectSilence(t, relay1)
	})
	t.Run("configured relay sending from another address is answered at giaddr", func(t *testing.T) {
		send(t, relay1, pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7, xid(0x23), withGiaddr("10.231.1.3", 1)),
			&net.UDPAddr{IP: net.IPv4(10, 231, 1, 1), Port: ServerPort})
		got := recvWithDst(t, relay3)
		want := received{reply: *offer("ipxe.efi", toRelay("10.231.1.3"), func(s *summary) {
			s.XID, s.To = "0xe2e20023", "<nil>"
			s.SIAddr, s.SName, s.Opt54 = "10.231.1.1", "10.231.1.1", "10.231.1.1"
		}), dst: "10.231.1.3", from: "10.231.1.1:67"}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(received{}), cmp.FilterPath(isPayload, cmp.Ignore())); diff != "" {
			t.Errorf("reply (-want +got):\n%s", diff)
		}
	})
}

// serveInNetns listens in namespace ns and serves until the returned stop
// is called.
func serveInNetns(t *testing.T, ns string, f *fixture) (stop func()) {
	t.Helper()
	var conns []*Conn
	if err := inNetns(ns, func() (err error) {
		conns, err = f.srv.Listen(context.Background())
		return err
	}); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.Serve(ctx, conns...) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not stop")
		}
	}
}

// waitIgnored waits until n DISCOVERs have been decided and ignored.
func waitIgnored(t *testing.T, f *fixture, n float64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var m dto.Metric
		if err := f.srv.m.requests.WithLabelValues("discover", resultIgnored).Write(&m); err != nil {
			t.Fatal(err)
		}
		if m.GetCounter().GetValue() >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DISCOVER was not ignored within 5 s (%g ignored so far)", m.GetCounter().GetValue())
		}
	}
}

// expectSilence fails if c receives a datagram from port 67 of the server
// (10.231.1.1 or 10.231.2.1) within 200 ms; its own broadcasts looping
// back do not count.
func expectSilence(t *testing.T, c *net.UDPConn) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	for {
		n, from, err := c.ReadFromUDP(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if from.Port == ServerPort && (from.IP.Equal(net.IPv4(10, 231, 1, 1)) || from.IP.Equal(net.IPv4(10, 231, 2, 1))) {
			t.Errorf("%v received %d bytes from the server (%v); want nothing", c.LocalAddr(), n, from)
			return
		}
	}
}
