package tftpd

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// preemptConfig holds each place of a client that acknowledges nothing
// for Timeout×Retries = 6 s, far longer than preemptGrace. Every client
// of these tests has an address of its own, so MaxPerSource 1 also shows
// that a preemption gives the victim's address its place back.
var preemptConfig = Config{MaxTransfers: 8, MaxPerSource: 1, Timeout: time.Second, Retries: 6}

// fetchRetrying sends req from conn every 250 ms (iPXE's first retry
// interval) until the server answers, then drives the transfer. It fails
// the test unless the first answer comes within limit, and returns how
// long it took.
func fetchRetrying(t testing.TB, conn *net.UDPConn, server string, req []byte, limit time.Duration) (rawResult, time.Duration) {
	t.Helper()
	start := time.Now()
	buf := make([]byte, 65536)
	for time.Since(start) < limit {
		send(t, conn, server, req)
		if err := conn.SetReadDeadline(time.Now().Add(250 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		n, from, err := conn.ReadFromUDP(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil || n < 4 {
			t.Fatalf("read: %v (%d bytes)", err, n)
		}
		took := time.Since(start)
		return rawDriveFrom(t, conn, buf[:n], from), took
	}
	t.Fatalf("no answer within %s of the first request (a quiet client holds its place %s)",
		limit, time.Duration(preemptConfig.Retries)*preemptConfig.Timeout)
	return rawResult{}, 0
}

// confirm acknowledges DATA 1 of h and waits for DATA 2, so the server
// has taken the acknowledgement; then h goes quiet, but confirmed.
func (h *held) confirm(t testing.TB) {
	t.Helper()
	ack(t, h.conn, h.tid, 1)
	for {
		p, _ := readPacket(t, h.conn)
		if binary.BigEndian.Uint16(p) == 3 && binary.BigEndian.Uint16(p[2:]) == 2 {
			return
		}
	}
}

// expectRefused fails unless a datagram to the port tid is refused
// (ICMP port unreachable): nothing listens there any more.
func expectRefused(t testing.TB, tid *net.UDPAddr) {
	t.Helper()
	c, err := net.DialUDP("udp4", nil, tid)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{0, 4, 0, 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 16)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("datagram to the preempted transfer's port %s: %v, want connection refused (its socket closed)", tid, err)
	}
}

// TestUnconfirmedPreempted: MaxTransfers are held by requests whose
// sources never acknowledge (as forged ones), each for 6 s. A real
// client retrying its request is served about preemptGrace later, in
// the place of the oldest of them, whose transfer ends: its socket is
// closed, its retransmissions stop, its address may start another.
func TestUnconfirmedPreempted(t *testing.T) {
	fx := start(t, preemptConfig)
	var hs []*held
	for i := range preemptConfig.MaxTransfers {
		hs = append(hs, hold(t, fmt.Sprintf("127.0.0.%d", 10+i), fx.addr, "ipxe.efi"))
	}
	filled := time.Now()
	waitMetric(t, fx, "siteboot_tftp_active_transfers", 8)

	client := dialFrom(t, "127.0.0.2", fx.addr, nil)
	defer client.Close()
	r, took := fetchRetrying(t, client, fx.addr, request(1, "ipxe.efi", "octet"), 2*time.Second)
	if r.SHA256 != sha256.Sum256(testFiles["ipxe.efi"]) {
		t.Fatalf("real client: %+v", r)
	}
	t.Logf("served %s after its first request", took)
	waitMetric(t, fx, `siteboot_tftp_requests_dropped_total{reason="preempted_unconfirmed"}`, 1)
	if l := fx.logs.wait("tftp request dropped", "reason=preempted_unconfirmed", "remote=127.0.0.10:", "for=127.0.0.2:"); len(l) != 1 {
		t.Errorf("log lines for the preempted transfer of 127.0.0.10 (the oldest): %q", l)
	}
	// The victim's goroutine has ended (active counts them), its socket is
	// closed and it sends nothing more, while the others retransmit DATA 1
	// a Timeout after the first.
	waitMetric(t, fx, "siteboot_tftp_active_transfers", 7)
	expectRefused(t, hs[0].tid)
	// (At least 50 ms: a read with time left also returns what is queued.)
	expectSilence(t, hs[0].conn, max(50*time.Millisecond, time.Until(filled.Add(preemptConfig.Timeout+500*time.Millisecond))))
	if p, _ := readPacket(t, hs[1].conn); binary.BigEndian.Uint16(p) != 3 || binary.BigEndian.Uint16(p[2:]) != 1 {
		t.Errorf("a transfer that was not preempted got %x, want DATA 1 again", p[:4])
	}
	// The victim's address has its per-source place back.
	again := dialFrom(t, "127.0.0.10", fx.addr, request(1, "tiny", "octet"))
	defer again.Close()
	if r := rawDrive(t, again); r.Size != len(testFiles["tiny"]) {
		t.Errorf("the victim's address afterwards: %+v", r)
	}
	waitMetric(t, fx, `siteboot_tftp_requests_dropped_total{reason="max_per_source"}`, 0)
	for _, h := range hs[1:] {
		h.abort(t)
	}
	waitMetric(t, fx, "siteboot_tftp_active_transfers", 0)
}

// TestConfirmedNotPreempted: a transfer whose client acknowledged DATA 1
// keeps its place however long it has run and however quiet it is now.
// With seven such transfers and one unconfirmed, a new request takes the
// unconfirmed one's place (not the older confirmed ones'); with eight
// confirmed, new requests are dropped as before.
func TestConfirmedNotPreempted(t *testing.T) {
	fx := start(t, preemptConfig)
	var hs []*held
	for i := range preemptConfig.MaxTransfers - 1 {
		h := hold(t, fmt.Sprintf("127.0.0.%d", 10+i), fx.addr, "ipxe.efi")
		h.confirm(t)
		hs = append(hs, h)
	}
	unconfirmed := hold(t, "127.0.0.17", fx.addr, "ipxe.efi")
	time.Sleep(preemptGrace + 100*time.Millisecond)

	first := dialFrom(t, "127.0.0.2", fx.addr, nil)
	defer first.Close()
	if r, _ := fetchRetrying(t, first, fx.addr, request(1, "tiny", "octet"), time.Second); r.Size != len(testFiles["tiny"]) {
		t.Fatalf("with one unconfirmed transfer old enough: %+v", r)
	}
	if l := fx.logs.wait("reason=preempted_unconfirmed", "remote=127.0.0.17:"); len(l) != 1 {
		t.Errorf("log lines for the preemption of the unconfirmed transfer: %q", fx.logs.lines("reason=preempted_unconfirmed"))
	}
	expectRefused(t, unconfirmed.tid)
	waitMetric(t, fx, "siteboot_tftp_active_transfers", 7) // first's transfer ends on its last ACK

	h := hold(t, "127.0.0.18", fx.addr, "ipxe.efi")
	h.confirm(t)
	hs = append(hs, h)
	waitMetric(t, fx, "siteboot_tftp_active_transfers", 8)
	time.Sleep(preemptGrace + 100*time.Millisecond)
	second := dialFrom(t, "127.0.0.3", fx.addr, nil)
	defer second.Close()
	for range 4 { // a second of retries
		send(t, second, fx.addr, request(1, "tiny", "octet"))
		expectSilence(t, second, 250*time.Millisecond)
	}
	waitMetric(t, fx, `siteboot_tftp_requests_dropped_total{reason="max_transfers"}`, 4)
	waitMetric(t, fx, `siteboot_tftp_requests_dropped_total{reason="preempted_unconfirmed"}`, 1)
	for _, h := range hs {
		h.abort(t)
	}
	waitMetric(t, fx, "siteboot_tftp_active_transfers", 0)
}

// TestAdmissionPreemption steps the admission table on a clock of its
// own: which request gets in, which is dropped and why, and which
// transfer gives its place up.
func TestAdmissionPreemption(t *testing.T) {
	a := newAdmission(3, 1, 500*time.Millisecond)
	t0 := time.Unix(1000, 0)
	key := func(host byte, port uint16) transferKey {
		return transferKey{client: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, host}), port), file: "ipxe.efi"}
	}
	var got []string
	step := func(ms int, k transferKey) *transfer {
		tr, victim, why := a.admit(k, t0.Add(time.Duration(ms)*time.Millisecond))
		line := fmt.Sprintf("%dms %s: ", ms, k.client)
		switch {
		case why != "":
			line += why
		case victim != nil:
			line += fmt.Sprintf("in, %s out after %s", victim.key.client, victim.age)
		default:
			line += "in"
		}
		got = append(got, fmt.Sprintf("%s (%d running)", line, a.count()))
		return tr
	}
	a1, b1, c1, d1, e1, f1 := key(1, 1), key(2, 1), key(3, 1), key(4, 1), key(5, 1), key(6, 1)
	ta := step(0, a1)
	tb := step(100, b1)
	step(200, c1)
	step(300, d1) // full, and the oldest unconfirmed is 300 ms old
	step(300, a1) // a repeat is a duplicate
	a.confirm(ta)
	step(650, d1) // a1 is older but confirmed: b1 gives way
	if a.attach(tb, nil) {
		t.Error("attach succeeded for a preempted transfer")
	}
	tb2 := step(700, b1) // b1's address and key are free again: c1 gives way
	a.release(tb)        // the preempted b1's goroutine ending frees nothing
	step(700, b1)
	step(1200, key(1, 2)) // 10.0.0.1 is at MaxPerSource: d1 (550 ms) stays
	te := step(1200, e1)
	a.confirm(tb2)
	a.confirm(te)
	step(9000, f1) // all confirmed
	a.release(ta)
	tf := step(9000, f1)
	want := []string{
		"0ms 10.0.0.1:1: in (1 running)",
		"100ms 10.0.0.2:1: in (2 running)",
		"200ms 10.0.0.3:1: in (3 running)",
		"300ms 10.0.0.4:1: max_transfers (3 running)",
		"300ms 10.0.0.1:1: duplicate (3 running)",
		"650ms 10.0.0.4:1: in, 10.0.0.2:1 out after 550ms (3 running)",
		"700ms 10.0.0.2:1: in, 10.0.0.3:1 out after 500ms (3 running)",
		"700ms 10.0.0.2:1: duplicate (3 running)",
		"1200ms 10.0.0.1:2: max_per_source (3 running)",
		"1200ms 10.0.0.5:1: in, 10.0.0.4:1 out after 550ms (3 running)",
		"9000ms 10.0.0.6:1: max_transfers (3 running)",
		"9000ms 10.0.0.6:1: in (3 running)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("admissions (-want +got):\n%s", diff)
	}
	if a.oldest != tf || a.newest != tf || tf.prev != nil || tf.next != nil {
		t.Errorf("unconfirmed list %v..%v, want f1 alone", a.oldest, a.newest)
	}
	sources := map[string]int{}
	for addr, n := range a.bySource {
		sources[addr.String()] = n
	}
	if diff := cmp.Diff(map[string]int{"10.0.0.2": 1, "10.0.0.5": 1, "10.0.0.6": 1}, sources); diff != "" {
		t.Errorf("transfers per source (-want +got):\n%s", diff)
	}
}
