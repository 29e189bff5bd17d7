package tftpd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"github.com/siteboot/siteboot/internal/logbuf"
	"github.com/siteboot/siteboot/internal/metrictest"
	"hash"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/images"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Test files: sizes that are not a multiple of 512 or 1468, one that is a
// multiple of both (its last DATA packet is empty), one in a subdirectory.
var testFiles = map[string][]byte{
	"ipxe.efi":              noise(300_001, 1),
	"undionly.kpxe":         noise(74_213, 2),
	"exact.bin":             noise(512*1468, 3),
	"arm64-efi/snponly.efi": noise(5_000, 4),
	"tiny":                  noise(100, 5),
	"big.bin":               noise(2<<20, 6), // 4,097 blocks of 512 bytes
}

func noise(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(size)))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// fixture is a running server over a fresh copy of testFiles.
type fixture struct {
	addr string
	dir  string
	conn *net.UDPConn
	logs *logBuffer
	reg  *prometheus.Registry
	// served is closed when Serve has returned serveErr.
	served   chan struct{}
	serveErr error
	// stop cancels Serve's context and waits up to 10 s for it to return.
	stop func() error
}

// start loads testFiles into an images.Set and serves it on
// 127.0.0.1:0 until the test ends; cfg.Files, Logger and Metrics are
// filled in.
func start(t testing.TB, cfg Config) *fixture {
	t.Helper()
	return startOn(t, cfg, net.IPv4(127, 0, 0, 1))
}

// startOn is start on ip (127.0.0.1 or ::1).
func startOn(t testing.TB, cfg Config, ip net.IP) *fixture {
	t.Helper()
	fx := &fixture{dir: t.TempDir(), logs: &logBuffer{}, reg: prometheus.NewRegistry()}
	for name, data := range testFiles {
		p := filepath.Join(fx.dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(fx.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	set, err := images.Load(images.Config{Dir: fx.dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = set.Close() })
	cfg.Files, cfg.Logger, cfg.Metrics = set, log, fx.reg
	if cfg.MaxPerSource == 0 {
		// Every client here is 127.0.0.1: one source, unless a test says.
		cfg.MaxPerSource = DefaultMaxTransfers
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP(transferNetwork(&net.UDPAddr{IP: ip}), &net.UDPAddr{IP: ip})
	if err != nil {
		t.Fatal(err)
	}
	fx.addr, fx.conn = conn.LocalAddr().String(), conn
	ctx, cancel := context.WithCancel(context.Background())
	fx.served = make(chan struct{})
	go func() {
		fx.serveErr = srv.Serve(ctx, conn)
		close(fx.served)
	}()
	fx.stop = func() error {
		cancel()
		select {
		case <-fx.served:
			return fx.serveErr
		case <-time.After(10 * time.Second):
			return errors.New("Serve did not return 10 s after cancel")
		}
	}
	t.Cleanup(func() {
		if err := fx.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	// One transfer first: a request queued before Serve asked for packet
	// info gets 512-byte blocks, which would make blksize checks flaky.
	if r := rawGet(t, fx.addr, request(1, "tiny", "octet")); r.Size != len(testFiles["tiny"]) {
		t.Fatalf("warm-up transfer: %+v", r)
	}
	// The server ends it on the last ACK, maybe after rawGet returned.
	waitMetric(t, fx, "siteboot_tftp_active_transfers", 0)
	return fx
}

// rawResult is what a hand-driven read request got back.
type rawResult struct {
	OACK     map[string]string // nil when the server sent no OACK
	FirstLen int               // payload length of DATA block 1
	Blocks   int               // DATA packets received
	Size     int
	SHA256   [32]byte
	ErrCode  int // of an ERROR packet, 0 if none
	ErrMsg   string
}

// request builds an RRQ (op 1) or WRQ (op 2); kv are option name/value
// pairs.
func request(op uint16, name, mode string, kv ...string) []byte {
	b := binary.BigEndian.AppendUint16(nil, op)
	for _, s := range append([]string{name, mode}, kv...) {
		b = append(append(b, s...), 0)
	}
	return b
}

// rawGet sends pkt to the server and drives the transfer by hand,
// acknowledging every OACK and DATA packet, until the last block or an
// ERROR.
func rawGet(t testing.TB, server string, pkt []byte) rawResult {
	t.Helper()
	conn := dialRaw(t, server, pkt)
	defer conn.Close()
	return rawDrive(t, conn)
}

// rawDrive is rawGet on a socket that has sent its request.
func rawDrive(t testing.TB, conn *net.UDPConn) rawResult {
	t.Helper()
	return rawDriveFrom(t, conn, nil, nil)
}

// rawDriveFrom is rawDrive with the server's first packet, from its
// transfer port, already read (first is nil if not).
func rawDriveFrom(t testing.TB, conn *net.UDPConn, first []byte, firstFrom *net.UDPAddr) rawResult {
	t.Helper()
	var res rawResult
	c := newWindowClient(t, conn)
	for {
		p, from := first, firstFrom
		if first == nil {
			p, from = readPacket(t, conn)
		}
		first = nil
		switch binary.BigEndian.Uint16(p) {
		case 6: // OACK
			res.OACK = parseOptions(p[2:])
			c.options(res.OACK)
			ack(t, conn, from, 0)
		case 3: // DATA
			c.tid = from
			took, last := c.take(p)
			if !took {
				continue
			}
			if res.Blocks++; res.Blocks == 1 {
				res.FirstLen = len(p) - 4
			}
			if last {
				res.Size, res.SHA256 = c.sum()
				return res
			}
		case 5: // ERROR
			res.ErrCode = int(binary.BigEndian.Uint16(p[2:]))
			res.ErrMsg = strings.TrimRight(string(p[4:]), "\x00")
			return res
		default:
			t.Fatalf("unexpected packet %x", p)
		}
	}
}

// windowClient receives DATA as edk2 does (NetworkPkg/Mtftp4Dxe/
// Mtftp4Rrq.c): it takes the blocks in order and acknowledges every
// window'th one taken since its last ACK, and the last block; a block out
// of order (a retransmission, or one after a lost block) is dropped and
// answered with an ACK of the last block taken. With a window of 1 that
// is RFC 1350's lock step.
type windowClient struct {
	t               testing.TB
	conn            *net.UDPConn
	tid             *net.UDPAddr // the server's transfer port
	blksize, window int
	next            uint16 // the block expected; wraps to 0 after 65535
	taken           int    // blocks taken since the last ACK
	acks            int    // ACKs sent
	size            int    // bytes taken
	hash            hash.Hash
}

// newWindowClient is a windowClient on conn, expecting block 1 in 512-byte
// blocks in lock step until options says otherwise.
func newWindowClient(t testing.TB, conn *net.UDPConn) *windowClient {
	return &windowClient{t: t, conn: conn, blksize: minBlockSize, window: 1, next: 1, hash: sha256.New()}
}

// options applies the blksize and windowsize of an OACK.
func (c *windowClient) options(oack map[string]string) {
	if v, ok := oack["blksize"]; ok {
		c.blksize = atoi(c.t, v)
	}
	if v, ok := oack["windowsize"]; ok {
		c.window = atoi(c.t, v)
	}
}

// take handles the DATA packet p: whether it was the block expected, and
// whether that was the last block.
func (c *windowClient) take(p []byte) (took, last bool) {
	c.t.Helper()
	if binary.BigEndian.Uint16(p[2:]) != c.next {
		c.ack(c.next - 1)
		return false, false
	}
	c.size += len(p) - 4
	c.hash.Write(p[4:])
	last = len(p)-4 < c.blksize
	if c.taken++; c.taken == c.window || last {
		c.ack(c.next)
	}
	c.next++
	return true, last
}

// ack acknowledges block and starts a new window.
func (c *windowClient) ack(block uint16) {
	c.t.Helper()
	ack(c.t, c.conn, c.tid, block)
	c.acks++
	c.taken = 0
}

// sum is the size and SHA-256 of the data taken.
func (c *windowClient) sum() (int, [32]byte) {
	var sum [32]byte
	c.hash.Sum(sum[:0])
	return c.size, sum
}

// finish receives until the last block and returns sum.
func (c *windowClient) finish() (int, [32]byte) {
	c.t.Helper()
	for {
		p, from := readPacket(c.t, c.conn)
		if binary.BigEndian.Uint16(p) != opDATA {
			c.t.Fatalf("got %x, want DATA", p[:4])
		}
		c.tid = from
		if _, last := c.take(p); last {
			return c.sum()
		}
	}
}

// socketPair is two UDP sockets on 127.0.0.1, for a sender driven without
// a Server; both close when the test ends.
func socketPair(t testing.TB) (srv, cli *net.UDPConn) {
	t.Helper()
	lo := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	for _, c := range []**net.UDPConn{&srv, &cli} {
		conn, err := net.ListenUDP("udp4", lo)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		*c = conn
	}
	return srv, cli
}

func dialRaw(t testing.TB, server string, pkt []byte) *net.UDPConn {
	t.Helper()
	if strings.HasPrefix(server, "[") {
		return dialFrom(t, "::1", server, pkt)
	}
	return dialFrom(t, "127.0.0.1", server, pkt)
}

// dialFrom opens a client socket on local (any 127/8 address is this
// host, and ::1) and sends pkt to server, unless pkt is nil.
func dialFrom(t testing.TB, local, server string, pkt []byte) *net.UDPConn {
	t.Helper()
	ip := net.ParseIP(local)
	conn, err := net.ListenUDP(transferNetwork(&net.UDPAddr{IP: ip}), &net.UDPAddr{IP: ip})
	if err != nil {
		t.Fatal(err)
	}
	if pkt != nil {
		send(t, conn, server, pkt)
	}
	return conn
}

func send(t testing.TB, conn *net.UDPConn, server string, pkt []byte) {
	t.Helper()
	to, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.WriteToUDP(pkt, to); err != nil {
		t.Fatal(err)
	}
}

func readPacket(t testing.TB, conn *net.UDPConn) ([]byte, *net.UDPAddr) {
	t.Helper()
	buf := make([]byte, 65536)
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, from, err := conn.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if n < 4 {
		t.Fatalf("short packet %x", buf[:n])
	}
	return buf[:n], from
}

func ack(t testing.TB, conn *net.UDPConn, to *net.UDPAddr, block uint16) {
	t.Helper()
	p := binary.BigEndian.AppendUint16([]byte{0, 4}, block)
	if _, err := conn.WriteToUDP(p, to); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatal(err)
	}
}

func parseOptions(b []byte) map[string]string {
	parts := bytes.Split(bytes.TrimSuffix(b, []byte{0}), []byte{0})
	out := map[string]string{}
	for i := 0; i+1 < len(parts); i += 2 {
		out[string(parts[i])] = string(parts[i+1])
	}
	return out
}

func atoi(t testing.TB, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// logBuffer is the fixture's log sink.
type logBuffer struct{ logbuf.Buffer }

// size is the number of bytes logged so far.
func (l *logBuffer) size() int { return l.Len() }

// lines returns the log lines containing all of subs.
func (l *logBuffer) lines(subs ...string) []string { return l.Lines(subs...) }

// wait returns the log lines containing all of subs, waiting up to 2 s
// for one (a server logs a transfer after its client has finished).
func (l *logBuffer) wait(subs ...string) []string { return l.waitCount(1, subs...) }

// waitCount is wait for n lines: the server may write a transfer's line
// after it has counted the transfer in its metrics.
func (l *logBuffer) waitCount(n int, subs ...string) []string {
	deadline := time.Now().Add(2 * time.Second)
	for {
		got := l.lines(subs...)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitGather is gather once it equals want, or after 2 s: a server counts
// a transfer after its last ACK, which may be after its client returned.
func waitGather(t testing.TB, reg *prometheus.Registry, want map[string]float64) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		got := metrictest.Values(t, reg)
		if cmp.Equal(want, got) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func slogText(w *logBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
