package dhcpproxy

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/siteboot/siteboot/discovery"
	"golang.org/x/net/ipv4"
)

// received is one datagram a test client got, with the destination address
// the kernel reports for it (IP_PKTINFO).
type received struct {
	reply   summary
	dst     string
	from    string
	payload []byte
}

// recvWithDst reads one datagram within 5 s, with its destination address.
func recvWithDst(t *testing.T, c *net.UDPConn) received {
	t.Helper()
	pc := ipv4.NewPacketConn(c)
	if err := pc.SetControlMessage(ipv4.FlagDst, true); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	n, cm, from, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatalf("client %v: no reply: %v", c.LocalAddr(), err)
	}
	r := received{payload: buf[:n], from: from.String()}
	if cm != nil {
		r.dst = cm.Dst.String()
	}
	r.reply = summarize(t, r.payload, nil)
	return r
}

// labClients are the test clients' sockets, created inside their namespaces.
type labClients struct {
	bcast1, relay1, uni1 *net.UDPConn // in c1
	bcast2               *net.UDPConn // in c2
}

func openLabClients(t *testing.T, lab *netnsLab) *labClients {
	t.Helper()
	cl := &labClients{}
	open := func(ns string, out **net.UDPConn, dev, addr string) {
		t.Helper()
		err := inNetns(ns, func() error {
			c, err := clientSocket(dev, addr)
			*out = c
			return err
		})
		if err != nil {
			t.Fatalf("client socket %s in %s: %v", addr, ns, err)
		}
		t.Cleanup(func() { (*out).Close() })
	}
	open(lab.c1, &cl.bcast1, "eth0", "0.0.0.0:68")
	open(lab.c1, &cl.relay1, "", "10.231.1.2:67")
	open(lab.c1, &cl.uni1, "", "10.231.1.2:0")
	open(lab.c2, &cl.bcast2, "eth0", "0.0.0.0:68")
	return cl
}

// TestServeNetns runs the server in its own network namespace on real
// ports 67 and 4011 of two veth links and talks to it from two client
// namespaces: broadcast offers leave by the arrival interface with that
// interface's address, relayed requests are answered to giaddr:67, 4011
// requests to their source, and unknown machines get nothing.
func TestServeNetns(t *testing.T) {
	lab := newNetnsLab(t)
	f := newFixture(t, nil)
	var conns []*Conn
	if err := inNetns(lab.srv, func() (err error) {
		conns, err = f.srv.Listen(context.Background())
		return err
	}); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	checkListened(t, conns)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.Serve(ctx, conns...) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not stop")
		}
	}()
	cl := openLabClients(t, lab)
	t.Run("broadcast offer on the arrival interface", func(t *testing.T) { testBroadcast(t, cl, f) })
	t.Run("relayed", func(t *testing.T) { testRelayed(t, cl) })
	t.Run("4011 unicast", func(t *testing.T) { test4011(t, cl) })
}

func checkListened(t *testing.T, conns []*Conn) {
	t.Helper()
	var got []string
	for _, c := range conns {
		got = append(got, c.Iface+" "+c.IP.String()+" "+c.PacketConn.LocalAddr().String())
	}
	slices.Sort(got)
	want := []string{"s1 10.231.1.1 0.0.0.0:4011", "s1 10.231.1.1 0.0.0.0:67",
		"s2 10.231.2.1 0.0.0.0:4011", "s2 10.231.2.1 0.0.0.0:67"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sockets (-want +got):\n%s", diff)
	}
}

var bcast67 = &net.UDPAddr{IP: net.IPv4bcast, Port: ServerPort}

func xid(b byte) dhcpv4.Modifier {
	return dhcpv4.WithTransactionID(dhcpv4.TransactionID{0xe2, 0xe2, 0, b})
}

func send(t *testing.T, c *net.UDPConn, pkt []byte, to *net.UDPAddr) {
	t.Helper()
	if _, err := c.WriteToUDP(pkt, to); err != nil {
		t.Fatalf("send to %v: %v", to, err)
	}
}

func testBroadcast(t *testing.T, cl *labClients, f *fixture) {
	// The unknown machine goes first: the known one's OFFER must be the
	// first datagram c1 sees.
	send(t, cl.bcast1, pxeReq(t, macUnknown, dhcpv4.MessageTypeDiscover, 7, xid(1)), bcast67)
	send(t, cl.bcast1, pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 0, xid(2)), bcast67)
	send(t, cl.bcast2, pxeReq(t, macCustom, dhcpv4.MessageTypeDiscover, 7, xid(3)), bcast67)
	from := func(ip string) func(*summary) {
		return func(s *summary) { s.SIAddr, s.SName, s.Opt54, s.To = ip, ip, ip, "<nil>" }
	}
	got := []received{recvWithDst(t, cl.bcast1), recvWithDst(t, cl.bcast2)}
	want := []received{
		{reply: *offer("undionly.kpxe", from("10.231.1.1"), func(s *summary) { s.XID = "0xe2e20002" }),
			dst: "255.255.255.255", from: "10.231.1.1:67"},
		{reply: *offer("custom/snponly.efi", from("10.231.2.1"), func(s *summary) { s.XID = "0xe2e20003" }),
			dst: "255.255.255.255", from: "10.231.2.1:67"},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(received{}), cmp.FilterPath(isPayload, cmp.Ignore())); diff != "" {
		t.Errorf("replies (-want +got):\n%s", diff)
	}
	wantS := []discovery.Sighting{{MAC: macUnknown, Arch: "x86_64-efi", Iface: "s1", At: testNow}}
	if diff := cmp.Diff(wantS, waitSightings(f, len(wantS)), equateAddrs); diff != "" {
		t.Errorf("sightings (-want +got):\n%s", diff)
	}
}

func isPayload(p cmp.Path) bool { return p.Last().String() == ".payload" }

func testRelayed(t *testing.T, cl *labClients) {
	relay := net.IPv4(10, 231, 1, 2)
	send(t, cl.relay1, pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 16, xid(4), dhcpv4.WithRelay(relay)),
		&net.UDPAddr{IP: net.IPv4(10, 231, 1, 1), Port: ServerPort})
	got := recvWithDst(t, cl.relay1)
	want := received{reply: *offer("http://10.231.1.1:8080/boot/ipxe.efi", asHTTP, func(s *summary) {
		s.XID, s.Flags, s.GIAddr, s.To = "0xe2e20004", 0, "10.231.1.2", "<nil>"
		s.SIAddr, s.SName, s.Opt54 = "10.231.1.1", "10.231.1.1", "10.231.1.1"
	}), dst: "10.231.1.2", from: "10.231.1.1:67"}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(received{}), cmp.FilterPath(isPayload, cmp.Ignore())); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}

func test4011(t *testing.T, cl *labClients) {
	send(t, cl.uni1, pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7, xid(5), withUUID,
		dhcpv4.WithClientIP(net.IPv4(10, 231, 1, 2)), dhcpv4.WithBroadcast(false)),
		&net.UDPAddr{IP: net.IPv4(10, 231, 1, 1), Port: PXEPort})
	got := recvWithDst(t, cl.uni1)
	want := received{reply: *offer("ipxe.efi", asACK, func(s *summary) {
		s.XID, s.Flags, s.CIAddr, s.To, s.Opt97 = "0xe2e20005", 0, "10.231.1.2", "<nil>", uuidHex
		s.SIAddr, s.SName, s.Opt54 = "10.231.1.1", "10.231.1.1", "10.231.1.1"
	}), dst: "10.231.1.2", from: "10.231.1.1:4011"}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(received{}), cmp.FilterPath(isPayload, cmp.Ignore())); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}
