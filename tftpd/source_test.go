package tftpd

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/siteboot/siteboot/internal/metrictest"
	"github.com/siteboot/siteboot/internal/netlab"
)

// transparentConn is a UDP socket on addr that may send from any source
// address (IP_TRANSPARENT, which needs CAP_NET_ADMIN): a forger's.
func transparentConn(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1)
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", addr)
	if errors.Is(err, unix.EPERM) {
		if os.Getenv(netlab.RequireEnv) == "require" {
			t.Fatalf("IP_TRANSPARENT refused with %s=require: %v", netlab.RequireEnv, err)
		}
		t.Skipf("needs CAP_NET_ADMIN for IP_TRANSPARENT: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	return pc.(*net.UDPConn)
}

// A request whose source is a broadcast address gets nothing: an answer
// would reach every host of the link, and the host that forged it could
// drive the whole transfer from there. On lo (127.0.0.1/8),
// 127.255.255.255 is the directed broadcast; Linux delivers a datagram
// from it where reverse-path filtering is off.
func TestBroadcastSourceGetsNothing(t *testing.T) {
	fx := start(t, Config{Timeout: 200 * time.Millisecond, Retries: 2})
	forger := transparentConn(t, "127.255.255.255:0")
	to, err := net.ResolveUDPAddr("udp4", fx.addr)
	if err != nil {
		t.Fatal(err)
	}
	pc := ipv4.NewPacketConn(forger)
	for _, req := range [][]byte{
		request(1, "ipxe.efi", "octet"),                    // a transfer
		request(1, "ipxe.efi", "octet", "blksize", "1468"), // an OACK
		request(2, "ipxe.efi", "octet"),                    // a refusal's ERROR
		request(1, "../etc/passwd", "octet"),               // another
	} {
		if _, err := pc.WriteTo(req, &ipv4.ControlMessage{Src: net.IPv4(127, 255, 255, 255)}, to); err != nil {
			t.Fatal(err)
		}
	}
	waitMetric(t, fx, `siteboot_tftp_requests_dropped_total{reason="not_host"}`, 4)
	if err := forger.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	if n, from, err := forger.ReadFromUDP(buf); err == nil {
		t.Errorf("the broadcast address was sent %d bytes from %s", n, from)
	}
	if got := fx.logs.lines("tftp transfer", "remote=127.255.255.255"); len(got) != 0 {
		t.Errorf("requests from a broadcast source were logged as transfers: %q", got)
	}
	// A host of the same network is still served.
	c := dialFrom(t, "127.0.0.9", fx.addr, nil)
	defer c.Close()
	r, _ := fetchRetrying(t, c, fx.addr, request(1, "ipxe.efi", "octet"), 2*time.Second)
	if r.SHA256 != sha256.Sum256(testFiles["ipxe.efi"]) {
		t.Fatalf("a host's fetch: %+v", r)
	}
}

// The server's sockets refuse to send to a broadcast address, whatever
// got past hostSource (a prefix the interface cache has not seen yet).
func TestSocketsRefuseBroadcast(t *testing.T) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bcast := &net.UDPAddr{IP: net.IPv4(127, 255, 255, 255), Port: 9}
	if _, err := conn.WriteToUDP([]byte("x"), bcast); err != nil {
		t.Fatalf("before setOptions, Go's UDP socket should send to a broadcast address: %v", err)
	}
	setOptions(conn)
	if _, err := conn.WriteToUDP([]byte("x"), bcast); !errors.Is(err, unix.EACCES) {
		t.Fatalf("send to %s after setOptions: %v, want EACCES", bcast, err)
	}
}

func TestHostSource(t *testing.T) {
	s := &Server{ifaces: newIfaceCache(time.Now)}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no lo: %v", err)
	}
	for _, c := range []struct {
		from string
		want bool
	}{
		{"127.0.0.9:1000", true},
		{"127.255.255.255:1000", false},
		{"127.0.0.0:1000", false},
		{"255.255.255.255:1000", false},
		{"224.0.0.1:1000", false},
		{"0.0.0.0:1000", false},
		{"127.0.0.9:0", false},
		{"[::1]:1000", true},
		{"[ff02::1]:1000", false},
		{"[::]:1000", false},
	} {
		d := datagram{client: netip.MustParseAddrPort(c.from), ifIndex: lo.Index}
		if got := s.hostSource(d); got != c.want {
			t.Errorf("hostSource(%s on lo) = %v, want %v", c.from, got, c.want)
		}
	}
	// Unknown interface: the addresses that are never one host's still go.
	if s.hostSource(datagram{client: netip.MustParseAddrPort("255.255.255.255:69")}) {
		t.Error("the limited broadcast passed without an interface")
	}
}

// The broadcast address of another interface's subnet is no host either:
// with reverse-path filtering off, Linux delivers a datagram from eth0's
// broadcast address that arrives on lo. The other interface's prefixes
// come from the host's address list, given here so that the test needs
// no second interface.
func TestHostSourceOtherInterfaces(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no lo: %v", err)
	}
	listed := 0
	ifaces := newIfaceCache(time.Now)
	ifaces.listAddrs = func() ([]net.Addr, error) {
		listed++
		return []net.Addr{
			&net.IPNet{IP: net.IPv4(127, 0, 0, 1), Mask: net.CIDRMask(8, 32)},
			&net.IPNet{IP: net.IPv4(192, 0, 2, 10), Mask: net.CIDRMask(24, 32)},
			&net.IPNet{IP: net.IPv4(198, 51, 100, 7), Mask: net.CIDRMask(31, 32)},
			&net.IPNet{IP: net.ParseIP("fd00::1"), Mask: net.CIDRMask(64, 128)},
		}, nil
	}
	s := &Server{ifaces: ifaces}
	for _, c := range []struct {
		from string
		want bool
	}{
		{"192.0.2.255:1000", false},
		{"192.0.2.0:1000", false},
		{"192.0.2.77:1000", true},
		{"198.51.100.6:1000", true}, // a /31 has two hosts (RFC 3021)
		{"198.51.100.7:1000", true},
		{"203.0.113.255:1000", true}, // a remote subnet's: cannot be told
		{"127.0.0.9:1000", true},
	} {
		d := datagram{client: netip.MustParseAddrPort(c.from), ifIndex: lo.Index}
		if got := s.hostSource(d); got != c.want {
			t.Errorf("hostSource(%s on lo, 192.0.2.10/24 on another interface) = %v, want %v", c.from, got, c.want)
		}
	}
	if listed != 1 {
		t.Errorf("the address list was read %d times for 7 requests; want once per %s", listed, ifaceTTL)
	}
}

// Requests forged with a machine's address, never acknowledged, no
// longer hold all of its places until they time out: past the grace the
// oldest gives its place to the machine's own request.
func TestForgedRequestsDoNotLockOutAnAddress(t *testing.T) {
	cfg := Config{MaxPerSource: DefaultMaxPerSource, Timeout: time.Second, Retries: DefaultRetries}
	fx := start(t, cfg)
	for range cfg.MaxPerSource {
		hold(t, "127.0.0.5", fx.addr, "ipxe.efi") // forged: never acknowledged
	}
	waitMetric(t, fx, "siteboot_tftp_active_transfers", float64(cfg.MaxPerSource))
	victim := dialFrom(t, "127.0.0.5", fx.addr, nil)
	defer victim.Close()
	r, took := fetchRetrying(t, victim, fx.addr, request(1, "ipxe.efi", "octet"), 2*time.Second)
	if r.SHA256 != sha256.Sum256(testFiles["ipxe.efi"]) {
		t.Fatalf("victim: %+v", r)
	}
	if took < preemptGrace/2 {
		t.Errorf("served after %s: before the grace, a place must not be taken", took)
	}
	if n := metrictest.Values(t, fx.reg)[`siteboot_tftp_requests_dropped_total{reason="preempted_unconfirmed"}`]; n < 1 {
		t.Errorf("preemptions counted: %v", n)
	}
}

// ERRORs go out within a budget: a flood of write requests, each smaller
// than its answer, brings back a bounded number of answers.
func TestRefusalsBounded(t *testing.T) {
	fx := start(t, Config{})
	c := dialRaw(t, fx.addr, nil)
	defer c.Close()
	const n = 200
	for range n {
		send(t, c, fx.addr, []byte{0, 2, 0, 0}) // WRQ "", mode ""
	}
	waitMetric(t, fx, `siteboot_tftp_requests_dropped_total{reason="error_limit"}`, n-errSourceBurst)
	got := 0
	buf := make([]byte, 2048)
	for {
		if err := c.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ReadFromUDP(buf); err != nil {
			break
		}
		got++
	}
	if got != errSourceBurst {
		t.Errorf("%d write requests got %d ERRORs, want %d (the per-source burst)", n, got, errSourceBurst)
	}
}

// Forged requests from many addresses must not silence another machine's
// refusals: a budget for all sources together let a flood of 4-byte write
// requests from made-up sources use up every ERROR, and a real machine's
// "file not found" never came.
func TestForgedRefusalsDoNotSilenceOthers(t *testing.T) {
	fx := start(t, Config{})
	var flood []*net.UDPConn
	for i := range 200 {
		c := dialFrom(t, fmt.Sprintf("127.0.%d.%d", 1+i/250, 2+i%250), fx.addr, nil)
		defer c.Close()
		flood = append(flood, c)
	}
	to, err := net.ResolveUDPAddr("udp", fx.addr)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 10 { // 10 per source, within each one's burst
		for _, c := range flood {
			if _, err := c.WriteToUDP([]byte{0, 2, 0, 0}, to); err != nil {
				t.Fatal(err)
			}
		}
		// Read before the next round: the socket's buffer would drop
		// the rest, and the test is of the budget, not of the buffer.
		waitMetric(t, fx, `siteboot_tftp_transfers_total{result="refused"}`, float64(len(flood)*(round+1)))
	}
	victim := dialFrom(t, "127.9.9.9", fx.addr, nil)
	defer victim.Close()
	names := []string{"pxelinux.cfg/01-aa-bb-cc-dd-ee-ff", "pxelinux.cfg/C0A80A05", "pxelinux.cfg/default"}
	for _, name := range names {
		send(t, victim, fx.addr, request(1, name, "octet"))
	}
	if got := countPackets(t, victim, time.Second); got != len(names) {
		t.Errorf("after 2,000 forged write requests from 200 sources, a machine's %d requests for missing names got %d ERRORs",
			len(names), got)
	}
}

// Ten machines that each try twelve missing names at once (PXELINUX's
// and GRUB's search orders) all get their twelve ERRORs.
func TestConfigProbeStormAllAnswered(t *testing.T) {
	fx := start(t, Config{})
	var cs []*net.UDPConn
	for m := range 10 {
		c := dialFrom(t, fmt.Sprintf("127.0.5.%d", 10+m), fx.addr, nil)
		defer c.Close()
		cs = append(cs, c)
	}
	for p := range 12 {
		for _, c := range cs {
			send(t, c, fx.addr, request(1, fmt.Sprintf("grub.cfg-%02d", p), "octet"))
		}
	}
	for i, c := range cs {
		if got := countPackets(t, c, 500*time.Millisecond); got != 12 {
			t.Errorf("machine %d: 12 requests for missing names got %d ERRORs", i, got)
		}
	}
	if n := metrictest.Values(t, fx.reg)[`siteboot_tftp_transfers_total{result="not_found"}`]; n != 120 {
		t.Errorf(`transfers_total{result="not_found"} = %v, want 120`, n)
	}
}

// countPackets counts the datagrams c receives until none comes for quiet.
func countPackets(t *testing.T, c *net.UDPConn, quiet time.Duration) int {
	t.Helper()
	n := 0
	buf := make([]byte, 2048)
	for {
		if err := c.SetReadDeadline(time.Now().Add(quiet)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ReadFromUDP(buf); err != nil {
			return n
		}
		n++
	}
}

// A long requested name is cut in log lines.
func TestLongNameCutInLogs(t *testing.T) {
	fx := start(t, Config{Timeout: 200 * time.Millisecond, Retries: 1})
	name := strings.Repeat("A", 990) + "/../x"
	c := dialRaw(t, fx.addr, request(1, name, "octet"))
	defer c.Close()
	readPacket(t, c) // the ERROR
	lines := fx.logs.wait("tftp transfer", "result=refused")
	if len(lines) != 1 {
		t.Fatalf("lines: %q", lines)
	}
	if len(lines[0]) > 2*logNameMax+400 {
		t.Errorf("a refusal's line is %d bytes for a %d-byte name: %s", len(lines[0]), len(name), lines[0])
	}
	if !strings.Contains(lines[0], "(995 bytes)") {
		t.Errorf("the line does not say the name's length: %s", lines[0])
	}
}
