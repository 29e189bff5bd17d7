package tftpd

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"github.com/siteboot/siteboot/internal/metrictest"
	"math"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// expectSilence fails if conn receives a datagram within d.
func expectSilence(t testing.TB, conn *net.UDPConn, d time.Duration) {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	n, from, err := conn.ReadFromUDP(buf)
	if err == nil {
		t.Fatalf("got %x from %s, want no answer", buf[:n], from)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal(err)
	}
}

// waitMetric waits up to 3 s for the metric key to reach want.
func waitMetric(t testing.TB, fx *fixture, key string, want float64) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := metrictest.Values(t, fx.reg)[key]
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", key, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// held is a transfer whose client read DATA 1 and acknowledges nothing.
type held struct {
	conn *net.UDPConn
	tid  *net.UDPAddr
}

func hold(t testing.TB, local, server, file string) *held {
	t.Helper()
	conn := dialFrom(t, local, server, request(1, file, "octet"))
	t.Cleanup(func() { conn.Close() })
	p, from := readPacket(t, conn)
	if binary.BigEndian.Uint16(p) != 3 {
		t.Fatalf("held transfer got %x, want DATA", p)
	}
	return &held{conn: conn, tid: from}
}

// abort ends the held transfer with an ERROR, as a client that gives up.
func (h *held) abort(t testing.TB) {
	t.Helper()
	if _, err := h.conn.WriteToUDP([]byte("\x00\x05\x00\x00gone\x00"), h.tid); err != nil {
		t.Fatal(err)
	}
}

// TestMaxTransfers: with MaxTransfers running, one more request is
// dropped unanswered, opening no fd; once a place is free, the client's
// retransmission is served.
func TestMaxTransfers(t *testing.T) {
	fx := start(t, Config{MaxTransfers: 3, Timeout: 3 * time.Second, Retries: 1})
	var hs []*held
	for range 3 {
		hs = append(hs, hold(t, "127.0.0.1", fx.addr, "ipxe.efi"))
	}
	waitMetric(t, fx, "siteboot_tftp_active_transfers", 3)
	fds := openFDs(t)
	pkt := request(1, "tiny", "octet")
	extra := dialFrom(t, "127.0.0.2", fx.addr, pkt)
	defer extra.Close()
	expectSilence(t, extra, 300*time.Millisecond)
	waitMetric(t, fx, `siteboot_tftp_requests_dropped_total{reason="max_transfers"}`, 1)
	if got := openFDs(t); got != fds+1 { // +1: extra's own socket
		t.Errorf("open fds %d → %d: the dropped request opened some", fds, got)
	}
	hs[0].abort(t)
	waitMetric(t, fx, "siteboot_tftp_active_transfers", 2)
	send(t, extra, fx.addr, pkt) // the client's retransmission
	if r := rawDrive(t, extra); r.Size != len(testFiles["tiny"]) || r.SHA256 != sha256.Sum256(testFiles["tiny"]) {
		t.Fatalf("after a place freed up: %+v", r)
	}
	for _, h := range hs[1:] {
		h.abort(t)
	}
	if n := len(fx.logs.wait("tftp request dropped", "reason=max_transfers", "remote=127.0.0.2:")); n != 1 {
		t.Errorf("%d log lines for the dropped request, want 1", n)
	}
}

// TestMaxPerSource: one address gets MaxPerSource transfers at once;
// another address is still served.
func TestMaxPerSource(t *testing.T) {
	fx := start(t, Config{MaxPerSource: 2, Timeout: 3 * time.Second, Retries: 1})
	hs := []*held{hold(t, "127.0.0.1", fx.addr, "ipxe.efi"), hold(t, "127.0.0.1", fx.addr, "ipxe.efi")}
	third := dialFrom(t, "127.0.0.1", fx.addr, request(1, "tiny", "octet"))
	defer third.Close()
	expectSilence(t, third, 300*time.Millisecond)
	waitMetric(t, fx, `siteboot_tftp_requests_dropped_total{reason="max_per_source"}`, 1)
	other := dialFrom(t, "127.0.0.2", fx.addr, request(1, "tiny", "octet"))
	defer other.Close()
	if r := rawDrive(t, other); r.Size != len(testFiles["tiny"]) {
		t.Fatalf("another address: %+v", r)
	}
	for _, h := range hs {
		h.abort(t)
	}
}

// TestDuplicateRequestsIgnored: an RRQ repeated from the same port while
// its transfer runs starts nothing; the one transfer completes.
func TestDuplicateRequestsIgnored(t *testing.T) {
	fx := start(t, Config{})
	pkt := request(1, "undionly.kpxe", "octet", "blksize", "1468")
	conn := dialRaw(t, fx.addr, pkt)
	defer conn.Close()
	p, tid := readPacket(t, conn)
	if binary.BigEndian.Uint16(p) != 6 {
		t.Fatalf("got %x, want OACK", p)
	}
	for range 3 {
		send(t, conn, fx.addr, pkt)
	}
	waitMetric(t, fx, `siteboot_tftp_requests_dropped_total{reason="duplicate"}`, 3)
	ack(t, conn, tid, 0)
	var data []byte
	for block := uint16(1); ; {
		p, from := readPacket(t, conn)
		if from.String() != tid.String() || binary.BigEndian.Uint16(p) != 3 {
			t.Fatalf("got %x from %s during the transfer from %s", p[:4], from, tid)
		}
		if binary.BigEndian.Uint16(p[2:]) != block {
			continue
		}
		data = append(data, p[4:]...)
		ack(t, conn, tid, block)
		if len(p)-4 < 1468 {
			break
		}
		block++
	}
	if sha256.Sum256(data) != sha256.Sum256(testFiles["undionly.kpxe"]) {
		t.Fatal("wrong content")
	}
	waitMetric(t, fx, `siteboot_tftp_transfers_total{result="ok"}`, 2) // with the warm-up
	// The same port may fetch the file again once the transfer is over.
	if r := rawDrive(t, func() *net.UDPConn { send(t, conn, fx.addr, request(1, "tiny", "octet")); return conn }()); r.Size != 100 {
		t.Fatalf("a later request from the same port: %+v", r)
	}
}

// TestFloodFromOnePort sends 6,000 read requests from one port, cycling
// through every file and a missing one, and never acknowledges. The
// server runs one transfer per file for it, its goroutines, fds and log
// stay bounded, and real clients are served during and after the flood.
func TestFloodFromOnePort(t *testing.T) {
	const maxPerSource = 8
	fx := start(t, Config{Timeout: 100 * time.Millisecond, Retries: 2, MaxPerSource: maxPerSource})
	g0, fds0, log0 := runtime.NumGoroutine(), openFDs(t), fx.logs.size()
	flood := dialFrom(t, "127.0.0.3", fx.addr, nil) // never reads
	defer flood.Close()
	files := []string{"ipxe.efi", "undionly.kpxe", "exact.bin", "tiny", "arm64-efi/snponly.efi", "missing.efi"}
	want := fetched{Size: int64(len(testFiles["ipxe.efi"])), SizeOK: true, SHA256: sha256.Sum256(testFiles["ipxe.efi"])}
	during := make(chan error, 1)
	go func() {
		got, err := pinGet(fx.addr, "ipxe.efi", 1468, true)
		if err == nil && got != want {
			err = errors.New("wrong content")
		}
		during <- err
	}()
	peakG, peakFDs := 0, 0
	for i := range 6000 {
		send(t, flood, fx.addr, request(1, files[i%len(files)], "octet"))
		if i%25 == 0 {
			peakG, peakFDs = max(peakG, runtime.NumGoroutine()), max(peakFDs, openFDs(t))
			time.Sleep(time.Millisecond) // let the server read: the kernel drops what overflows its buffer
		}
	}
	if err := <-during; err != nil {
		t.Errorf("fetch during the flood: %v", err)
	}
	// At most one transfer per file for the flood (5 of its 8 places) and
	// the client's, each a goroutine and two fds, besides the client's own
	// goroutine and socket, the flood's socket and a little slack (a
	// missing file's goroutine, an interface lookup's netlink socket).
	if limit := g0 + maxPerSource + 6; peakG > limit {
		t.Errorf("goroutines peaked at %d, want at most %d (%d before)", peakG, limit, g0)
	}
	if limit := fds0 + 2*maxPerSource + 4; peakFDs > limit {
		t.Errorf("open fds peaked at %d, want at most %d (%d before)", peakFDs, limit, fds0)
	}
	m := metrictest.Values(t, fx.reg)
	seen := m[`siteboot_tftp_requests_dropped_total{reason="duplicate"}`] + m[`siteboot_tftp_transfers_total{result="not_found"}`]
	if seen < 3000 {
		t.Errorf("the server saw %v duplicates and missing files of 6000 requests; the flood did not reach it", seen)
	}
	if got, err := pinGet(fx.addr, "ipxe.efi", 1468, true); err != nil || got != want {
		t.Errorf("fetch after the flood: %+v, %v", got, err)
	}
	// The last transfers end with their timeouts (and the server's side of
	// the last fetch just after its client returned).
	deadline := time.Now().Add(3 * time.Second)
	for (runtime.NumGoroutine() > g0 || openFDs(t) > fds0+1) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > g0 {
		t.Errorf("goroutines %d → %d once the flood's transfers timed out", g0, g)
	}
	if fds := openFDs(t); fds > fds0+1 { // +1: the flood's socket
		t.Errorf("open fds %d → %d once the flood's transfers timed out", fds0, fds)
	}
	t.Logf("goroutines %d, peak %d; fds %d, peak %d; requests seen %v; log bytes %d",
		g0, peakG, fds0, peakFDs, seen, fx.logs.size()-log0)
	if n := fx.logs.size() - log0; n > 48<<10 {
		t.Errorf("the flood logged %d bytes, want at most 48 KiB", n)
	}
	// The next line of a reason, or the periodic flush once its bucket
	// refills (flushEvery), says how many of its lines were held back.
	if len(fx.logs.wait("suppressed=")) == 0 {
		t.Error("no log line says how many lines were suppressed")
	}
}

// TestLogLimit checks the token bucket with a fake clock.
func TestLogLimit(t *testing.T) {
	now := time.Unix(0, 0)
	buf := &logBuffer{}
	log := slogText(buf)
	suppressed := 0
	l := newLimitedLog(log, func() time.Time { return now }, func(string) { suppressed++ })
	rate := logRate{burst: 3, every: time.Second}
	for range 10 {
		l.Log(log, 0, "busy", rate, "line")
	}
	l.Log(log, 0, "other", rate, "line")
	if got := len(buf.lines("msg=line")); got != 4 || suppressed != 7 {
		t.Fatalf("%d lines, %d suppressed; want 3 of busy, 1 of other and 7 suppressed", got, suppressed)
	}
	now = now.Add(1500 * time.Millisecond)
	l.Log(log, 0, "busy", rate, "line")
	if got := buf.lines("msg=line", "suppressed=7"); len(got) != 1 {
		t.Fatalf("the line after the pause lacks suppressed=7:\n%s", strings.Join(buf.lines(""), "\n"))
	}
	for range 5 {
		l.Log(log, 0, "busy", rate, "line")
	}
	l.flush(false) // no token yet
	if got := buf.lines("tftp log lines suppressed"); len(got) != 0 {
		t.Fatalf("flush without a token: %v", got)
	}
	now = now.Add(time.Second)
	l.flush(false)
	if got := buf.lines("tftp log lines suppressed", "reason=busy"); len(got) != 1 || !strings.Contains(got[0], "suppressed=5") {
		t.Fatalf("flush: %v", got)
	}
}

// TestTimeLimit: Retries plus 60 Timeouts, or one per 8 KiB if more,
// whatever the client's options; a netascii file counts double; no limit
// where a Duration would overflow.
func TestTimeLimit(t *testing.T) {
	tests := []struct {
		name     string
		timeout  time.Duration
		retries  int
		size     int64
		netascii bool
		want     time.Duration
	}{
		{"undionly.kpxe: the floor", time.Second, 5, 74_213, false, 65 * time.Second},
		{"empty file: the floor", time.Second, 5, 0, false, 65 * time.Second},
		{"480 KiB: still the floor", time.Second, 5, 480 << 10, false, 65 * time.Second},
		{"1 MB: one Timeout per 8 KiB", time.Second, 5, 1_000_000, false, (122 + 5) * time.Second},
		{"1 MB netascii counts double", time.Second, 5, 1_000_000, true, (244 + 5) * time.Second},
		{"30 MB: an hour", time.Second, 5, 30_000_000, false, (3662 + 5) * time.Second},
		{"in Timeouts", 200 * time.Millisecond, 5, 74_213, false, 65 * 200 * time.Millisecond},
		{"overflow: none", time.Hour, 5, 1 << 60, false, 0},
		{"Retries overflow: none", time.Second, math.MaxInt, 0, false, 0},
		{"size too large to double: none", time.Second, 5, 1 << 62, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := timeLimit(tc.timeout, tc.retries, tc.size, tc.netascii); got != tc.want {
				t.Errorf("timeLimit = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSlowClientEndsAtTimeLimit: a client that acknowledges one block at
// a time, each well within Timeout × Retries, keeps a transfer alive for
// ever without a time limit. With Timeout 20 ms and Retries 10 the 51
// blocks of undionly.kpxe (blksize 1468, lock step: the most windows a
// client can ask for) may take 70 Timeouts, 1.4 s; at one block per
// 60 ms the client would need 3 s. The server ends the transfer with an
// ERROR saying why, logs it as a timeout, and frees its place.
func TestSlowClientEndsAtTimeLimit(t *testing.T) {
	fx := start(t, Config{Timeout: 20 * time.Millisecond, Retries: 10})
	started := time.Now()
	conn := dialRaw(t, fx.addr, request(1, "undionly.kpxe", "octet", "blksize", "1468"))
	defer conn.Close()
	p, tid := readPacket(t, conn)
	if binary.BigEndian.Uint16(p) != opOACK {
		t.Fatalf("got %x, want an OACK", p)
	}
	ack(t, conn, tid, 0)
	blocks := len(testFiles["undionly.kpxe"])/1468 + 1
	var msg string
	acked := 0
	buf := make([]byte, 2048)
	tick := time.Now()
	for msg == "" && time.Since(started) < 5*time.Second {
		// Read what comes (blocks sent again) until the next tick,
		// watching for an ERROR; then acknowledge one more block.
		tick = tick.Add(60 * time.Millisecond)
		if err := conn.SetReadDeadline(tick); err != nil {
			t.Fatal(err)
		}
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if n >= 4 && binary.BigEndian.Uint16(buf) == opERROR {
				msg = strings.TrimRight(string(buf[4:n]), "\x00")
				break
			}
		}
		if msg == "" && acked < blocks {
			acked++
			ack(t, conn, tid, uint16(acked))
		}
	}
	elapsed := time.Since(started)
	if msg != "transfer too slow" {
		t.Fatalf("after %v and %d of %d blocks acknowledged: ERROR %q, want %q", elapsed, acked, blocks, msg, "transfer too slow")
	}
	if acked >= blocks || elapsed < 1400*time.Millisecond {
		t.Errorf("ended after %v with %d of %d blocks acknowledged; want it at the 1.4 s limit, before the last block", elapsed, acked, blocks)
	}
	if lines := fx.logs.wait("tftp transfer", "file=undionly.kpxe", "result=timeout", `err="transfer too slow"`); len(lines) != 1 {
		t.Errorf("no timeout line:\n%s", strings.Join(fx.logs.lines("tftp transfer"), "\n"))
	}
	waitMetric(t, fx, `siteboot_tftp_transfers_total{result="timeout"}`, 1)
	waitMetric(t, fx, "siteboot_tftp_active_transfers", 0)
}

// TestTimeLimitTakesQueuedACKs: a read whose deadline has passed returns
// at once without what is queued. An ACK that arrived by the time limit
// (here before the sender even read) still completes the transfer.
func TestTimeLimitTakesQueuedACKs(t *testing.T) {
	srv, cli := socketPair(t)
	ack(t, cli, srv.LocalAddr().(*net.UDPAddr), 1) // queued before DATA 1 goes
	x := &sender{conn: srv, to: cli.LocalAddr().(*net.UDPAddr), timeout: time.Second, retries: 5,
		blksize: 512, window: 1, end: time.Now().Add(-time.Millisecond)}
	file := testFiles["tiny"]
	n, err := x.run(make(chan struct{}), bytes.NewReader(file), nil)
	if err != nil || n != int64(len(file)) {
		t.Fatalf("run = %d, %v; want %d, nil", n, err, len(file))
	}
	p, _ := readPacket(t, cli)
	wantData(t, p, 1)
	expectSilence(t, cli, 100*time.Millisecond) // no ERROR
}
