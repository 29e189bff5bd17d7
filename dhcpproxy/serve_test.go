package dhcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	dto "github.com/prometheus/client_model/go"
	"github.com/siteboot/siteboot/discovery"
	"github.com/siteboot/siteboot/internal/metrictest"
	"golang.org/x/sys/unix"
)

// serveLoopback runs the fixture's server on a real UDP socket on
// 127.0.0.1:0 serving the 4011 role, and returns its address and a stop
// function that cancels and waits for Serve's result.
func serveLoopback(t *testing.T, f *fixture) (*net.UDPAddr, func() error) {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- f.srv.Serve(ctx, &Conn{PacketConn: pc, Iface: "lo", IP: net.IPv4(127, 0, 0, 1), Port: PXEPort})
	}()
	stop := sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			return errors.New("Serve did not return within 5s of cancel")
		}
	})
	t.Cleanup(func() { _ = stop() })
	return pc.LocalAddr().(*net.UDPAddr), stop
}

// waitSightings waits up to 5 s for n sightings and returns them: several
// readers share a socket, so a packet sent before the one answered may
// still be in another reader's hands when the reply arrives.
func waitSightings(f *fixture, n int) []discovery.Sighting {
	for deadline := time.Now().Add(5 * time.Second); len(f.rec.sightings()) < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	return f.rec.sightings()
}

// readReply waits up to 5 s for one datagram.
func readReply(t *testing.T, c *net.UDPConn) ([]byte, *net.UDPAddr) {
	t.Helper()
	buf := make([]byte, 2048)
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, from, err := c.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	return buf[:n], from
}

func TestServeLoopback4011(t *testing.T) {
	f := newFixture(t, nil)
	addr, stop := serveLoopback(t, f)
	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	send := func(pkt []byte) {
		t.Helper()
		if _, err := client.WriteToUDP(pkt, addr); err != nil {
			t.Fatal(err)
		}
	}

	// Junk and an unknown machine get no answer; the known machine's
	// REQUEST, sent after them on the same socket, must be the first reply.
	send([]byte("not a dhcp packet"))
	send(pxeReq(t, macUnknown, dhcpv4.MessageTypeRequest, 7, withUUID))
	known := pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7, withUUID,
		dhcpv4.WithTransactionID(dhcpv4.TransactionID{1, 2, 3, 4}))
	send(known)
	reply, from := readReply(t, client)

	got := summarize(t, reply, client.LocalAddr().(*net.UDPAddr))
	want := offer("ipxe.efi", asACK, func(s *summary) {
		s.XID, s.SIAddr, s.SName, s.Opt54 = "0x01020304", "127.0.0.1", "127.0.0.1", "127.0.0.1"
		s.Opt97, s.To = uuidHex, client.LocalAddr().String()
	})
	if diff := cmp.Diff(*want, got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	if from.String() != addr.String() {
		t.Errorf("reply came from %v, want the server socket %v", from, addr)
	}
	wantSightings := []discovery.Sighting{{MAC: macUnknown, ProductUUID: "4c4c4544-004a-3510-804b-b4c04f565931",
		Arch: "x86_64-efi", Iface: "lo", At: testNow}}
	if diff := cmp.Diff(wantSightings, waitSightings(f, len(wantSightings)), equateAddrs); diff != "" {
		t.Errorf("sightings (-want +got):\n%s", diff)
	}
	if err := stop(); err != nil {
		t.Errorf("Serve returned %v after cancel, want nil", err)
	}
}

func TestServeGateClosesBetweenPackets(t *testing.T) {
	f := newFixture(t, nil)
	addr, _ := serveLoopback(t, f)
	client, err := net.DialUDP("udp4", nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	f.gate.closed.Store(true)
	if _, err := client.Write(pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7)); err != nil {
		t.Fatal(err)
	}
	// Reopen the gate only once the server has handled (and refused) the
	// first packet.
	gated := func() float64 {
		var m dto.Metric
		if err := f.srv.m.requests.WithLabelValues("request", resultGateClosed).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	for deadline := time.Now().Add(5 * time.Second); gated() < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first packet was never handled")
		}
	}
	f2 := pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 0, dhcpv4.WithTransactionID(dhcpv4.TransactionID{9, 9, 9, 9}))
	f.gate.closed.Store(false)
	if _, err := client.Write(f2); err != nil {
		t.Fatal(err)
	}
	reply, _ := readReply(t, client)
	if got := summarize(t, reply, nil); got.XID != "0x09090909" || got.File != "undionly.kpxe" {
		t.Errorf("first reply = xid %s file %q; the gated packet must not have been answered", got.XID, got.File)
	}
}

func TestServeStopsWhenSocketsClose(t *testing.T) {
	f := newFixture(t, nil)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.srv.Serve(context.Background(), &Conn{PacketConn: pc, Iface: "lo", Port: PXEPort}) }()
	pc.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v after its socket closed, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its only socket closed")
	}
	if err := f.srv.Serve(context.Background()); err == nil {
		t.Error("Serve without sockets returned nil")
	}
}

// A socket that refuses every reply (here shut for writing: each send
// fails with EPIPE, as a full send buffer now drops the rest of a batch) wrote one
// Warn line per reply, so whoever could make sends fail set the log's
// rate. Each interface gets sendLogBurst lines; the rest go to Debug, and
// the counter still counts every one.
func TestSendErrorLinesBounded(t *testing.T) {
	var buf bytes.Buffer
	f := newFixture(t, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := pc.(*net.UDPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	// An unconnected UDP socket reports ENOTCONN but is shut all the same.
	if err := raw.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_WR) }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- f.srv.Serve(ctx, &Conn{PacketConn: pc, Iface: "lo", IP: net.IPv4(127, 0, 0, 1), Port: PXEPort})
	}()
	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	const n = 40
	for i := range n {
		pkt := pxeReq(t, macPlain, dhcpv4.MessageTypeRequest, 7, withUUID,
			dhcpv4.WithTransactionID(dhcpv4.TransactionID{0, 0, 0, byte(i)}))
		if _, err := client.WriteToUDP(pkt, pc.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); metrictest.Counter(t, f.srv.m.sendErrors) < n && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := metrictest.Counter(t, f.srv.m.sendErrors); got != n {
		t.Fatalf("send_errors_total = %v, want %d (every reply refused)", got, n)
	}
	levels := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m["msg"] == "dhcpproxy: send reply" {
			levels[m["level"].(string)]++
		}
	}
	if levels["WARN"] != sendLogBurst || levels["DEBUG"] != n-sendLogBurst {
		t.Errorf("%d refused replies wrote %v send-reply lines; want %d at WARN and the rest at DEBUG", n, levels, sendLogBurst)
	}
}
