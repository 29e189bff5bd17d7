package dhcpproxy

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"
)

// queuedBytes is the memory of uc's receive queue (SO_MEMINFO's
// rmem_alloc): each datagram's skb, as the kernel counts it.
func queuedBytes(t *testing.T, uc *net.UDPConn) int {
	t.Helper()
	var queued int
	rawFD(t, uc, func(fd int) {
		var mem [unix.SK_MEMINFO_VARS]uint32
		l := uint32(unsafe.Sizeof(mem))
		if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
			t.Fatalf("SO_MEMINFO: %v", e)
		}
		queued = int(mem[unix.SK_MEMINFO_RMEM_ALLOC])
	})
	return queued
}

// waitQueued waits until uc's receive queue holds at least bytes.
func waitQueued(t *testing.T, uc *net.UDPConn, bytes int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); queuedBytes(t, uc) < bytes; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("receive queue holds %d bytes after 5 s, want %d", queuedBytes(t, uc), bytes)
		}
	}
}

// sendQueued sends pkts from client to srv and waits until all are in
// srv's receive queue: it learns what one datagram costs there from the
// first (the smallest, sent alone and read with b).
func sendQueued(t *testing.T, b *batchIO, client, srv *net.UDPConn, pkts [][]byte) {
	t.Helper()
	to := srv.LocalAddr().(*net.UDPAddr)
	if _, err := client.WriteToUDP(pkts[0], to); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, srv, 1)
	one := queuedBytes(t, srv)
	if n, err := b.read(); n != 1 || err != nil {
		t.Fatalf("read of the first datagram: %d, %v", n, err)
	}
	for _, p := range pkts {
		if _, err := client.WriteToUDP(p, to); err != nil {
			t.Fatal(err)
		}
	}
	waitQueued(t, srv, len(pkts)*one)
}

// TestBatchIOReadsWhatIsQueued: datagrams queued on the socket come back
// from as few reads as batchSize allows, each with its own bytes, source
// and destination (IP_PKTINFO), in the order they were sent.
func TestBatchIOReadsWhatIsQueued(t *testing.T) {
	srv := loopbackUDP(t)
	c := &Conn{PacketConn: srv, Iface: "lo", IP: net.IPv4(127, 0, 0, 1), Port: PXEPort}
	b := newBatchIO(c)
	if b == nil {
		t.Fatal("newBatchIO: nil for an IPv4 UDP socket")
	}
	client := loopbackUDP(t)
	const n = batchSize + 8
	var pkts [][]byte
	for i := range n {
		pkts = append(pkts, bytes.Repeat([]byte{byte(i)}, 100+i))
	}
	sendQueued(t, b, client, srv, pkts)
	from := client.LocalAddr().(*net.UDPAddr).AddrPort()
	seen := 0
	for reads := 1; seen < n; reads++ {
		got, err := b.read()
		if err != nil {
			t.Fatal(err)
		}
		if want := min(n-seen, batchSize); got != want {
			t.Errorf("read %d returned %d datagrams, want %d (all queued, at most %d)", reads, got, want, batchSize)
		}
		for i := range got {
			pkt, in := b.packet(i, c)
			if want := bytes.Repeat([]byte{byte(seen)}, 100+seen); !bytes.Equal(pkt, want) {
				t.Errorf("datagram %d: %d bytes of %v, want %d of %d", seen, len(pkt), pkt[:1], len(want), seen)
			}
			if in.Source == nil || in.Source.AddrPort() != from {
				t.Errorf("datagram %d: source %v, want %v", seen, in.Source, from)
			}
			if in.Dst != netip.MustParseAddr("127.0.0.1") || in.Iface != "lo" || in.Port != PXEPort {
				t.Errorf("datagram %d: arrived as %+v, want to 127.0.0.1 on lo port %d", seen, in, PXEPort)
			}
			seen++
		}
		if reads > 2 {
			t.Fatalf("%d of %d datagrams after %d reads", seen, n, reads)
		}
	}
}

// TestBatchIOTruncates: a datagram longer than maxPacket comes back empty
// (decided as malformed), even when its first maxPacket bytes are a valid
// request, and the next datagram is whole.
func TestBatchIOTruncates(t *testing.T) {
	srv := loopbackUDP(t)
	c := &Conn{PacketConn: srv, Iface: "lo", Port: PXEPort}
	b := newBatchIO(c)
	client := loopbackUDP(t)
	valid := pxeReq(t, macPlain, dhcpv4.MessageTypeDiscover, 7)
	long := append(append([]byte(nil), valid...), make([]byte, maxPacket+500-len(valid))...)
	sendQueued(t, b, client, srv, [][]byte{make([]byte, 300), long, make([]byte, 300)})
	var lens []int
	for len(lens) < 3 {
		n, err := b.read()
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			pkt, _ := b.packet(i, c)
			lens = append(lens, len(pkt))
		}
	}
	if lens[0] != 300 || lens[1] != 0 || lens[2] != 300 {
		t.Errorf("datagrams read as %v bytes, want [300 0 300]", lens)
	}
	f := newFixture(t, nil)
	if d := f.srv.decide(long[:maxPacket], arrive67); d.reply == nil {
		t.Fatalf("the long datagram's first %d bytes decided %q: the test needs them answerable", maxPacket, d.label())
	}
}

// TestBatchIOSendSkipsRefused: a reply the kernel refuses (a broadcast
// from a socket without SO_BROADCAST) is reported with its index, and the
// replies after it in the batch are still sent.
func TestBatchIOSendSkipsRefused(t *testing.T) {
	srv := loopbackUDP(t)
	rawFD(t, srv, func(fd int) { // Go sets it on every UDP socket
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 0); err != nil {
			t.Fatal(err)
		}
	})
	b := newBatchIO(&Conn{PacketConn: srv, Iface: "lo", Port: PXEPort})
	a, z := loopbackUDP(t), loopbackUDP(t)
	dests := []*net.UDPAddr{a.LocalAddr().(*net.UDPAddr), {IP: net.IPv4bcast, Port: 68}, z.LocalAddr().(*net.UDPAddr)}
	for i, to := range dests {
		if !b.queue([]byte{'r', byte(i)}, to) {
			t.Fatalf("reply %d to %v not queued", i, to)
		}
	}
	if b.queue([]byte("v6"), &net.UDPAddr{IP: net.ParseIP("::1"), Port: 68}) {
		t.Error("a reply to an IPv6 address was queued on an IPv4 socket")
	}
	var failed []int
	var ferr error
	if err := b.send(func(i int, err error) { failed, ferr = append(failed, i), err }); err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0] != 1 || !errors.Is(ferr, unix.EACCES) {
		t.Errorf("failed replies %v (%v), want [1] with EACCES", failed, ferr)
	}
	for i, uc := range map[int]*net.UDPConn{0: a, 2: z} {
		got, _ := readReply(t, uc)
		if !bytes.Equal(got, []byte{'r', byte(i)}) {
			t.Errorf("reply %d arrived as %q", i, got)
		}
	}
	if b.queued != 0 || b.outIov[0].Base != nil {
		t.Errorf("after send: %d replies queued, first still held: %v", b.queued, b.outIov[0].Base != nil)
	}
}

// TestBatchIOOnlyIPv4UDP: sockets batchIO cannot read (IPv6, not UDP)
// get none, and Serve reads them the other way.
func TestBatchIOOnlyIPv4UDP(t *testing.T) {
	pc6, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer pc6.Close()
	if newBatchIO(&Conn{PacketConn: pc6}) != nil {
		t.Error("newBatchIO made a batch reader for an IPv6 socket")
	}
	if newBatchIO(&Conn{PacketConn: packetOnly{loopbackUDP(t)}}) != nil {
		t.Error("newBatchIO made a batch reader for a conn that is no *net.UDPConn")
	}
}

// packetOnly hides a UDPConn's type.
type packetOnly struct{ net.PacketConn }
