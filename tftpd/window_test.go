package tftpd

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pin/tftp/v3/netascii"
)

// TestNegotiateWindowsize: windowsize (RFC 7440) is granted up to the
// limit and to 64 KiB of blocks, acknowledged even when that is 1, and
// ignored (left out, lock step) when it is not a number in 1..65535.
func TestNegotiateWindowsize(t *testing.T) {
	tests := []struct {
		name                    string
		opts                    []string
		blockLimit, windowLimit int
		blksize, window         int
		oack                    []string
	}{
		{"asked 4", []string{"windowsize", "4"}, 1468, 16, 512, 4, []string{"windowsize", "4"}},
		{"asked 100: the limit", []string{"windowsize", "100"}, 1468, 16, 512, 16, []string{"windowsize", "16"}},
		{"asked 65535", []string{"windowsize", "65535"}, 1468, 16, 512, 16, []string{"windowsize", "16"}},
		{"asked 1", []string{"windowsize", "1"}, 1468, 16, 512, 1, []string{"windowsize", "1"}},
		{"limit 1: lock step, said so", []string{"windowsize", "4"}, 1468, 1, 512, 1, []string{"windowsize", "1"}},
		{"0 ignored", []string{"windowsize", "0"}, 1468, 16, 512, 1, nil},
		{"abc ignored", []string{"windowsize", "abc"}, 1468, 16, 512, 1, nil},
		{"70000 ignored", []string{"windowsize", "70000"}, 1468, 16, 512, 1, nil},
		{"65536 ignored", []string{"windowsize", "65536"}, 1468, 16, 512, 1, nil},
		{"negative ignored", []string{"windowsize", "-4"}, 1468, 16, 512, 1, nil},
		{"empty ignored", []string{"windowsize", ""}, 1468, 16, 512, 1, nil},
		{"names as sent: WINDOWSIZE ignored", []string{"WINDOWSIZE", "4"}, 1468, 16, 512, 1, nil},
		{"blksize 65464: one block a window", []string{"blksize", "65464", "windowsize", "16"}, 65464, 16,
			65464, 1, []string{"blksize", "65464", "windowsize", "1"}},
		{"blksize 8192: 64 KiB is 8 blocks", []string{"blksize", "8192", "windowsize", "64"}, 65464, 64,
			8192, 8, []string{"blksize", "8192", "windowsize", "8"}},
		{"blksize 1468: 64 KiB is 44 blocks", []string{"blksize", "1468", "windowsize", "64"}, 1468, 64,
			1468, 44, []string{"blksize", "1468", "windowsize", "44"}},
		{"the cap follows the blksize granted", []string{"blksize", "65464", "windowsize", "64"}, 1024, 64,
			1024, 64, []string{"blksize", "1024", "windowsize", "64"}},
		{"edk2's request", []string{"tsize", "0", "blksize", "1468", "windowsize", "4"}, 1468, 16,
			1468, 4, []string{"blksize", "1468", "tsize", "300001", "windowsize", "4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := parseRequest(request(1, "ipxe.efi", "octet", tc.opts...))
			if err != nil {
				t.Fatal(err)
			}
			blksize, window, oack := r.negotiate(tc.blockLimit, tc.windowLimit, 300001)
			if blksize != tc.blksize || window != tc.window {
				t.Errorf("blksize %d, window %d; want %d, %d", blksize, window, tc.blksize, tc.window)
			}
			if diff := cmp.Diff(tc.oack, oack); diff != "" {
				t.Errorf("OACK (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWindowNegotiation drives windowed transfers end to end: the OACK,
// the file received by a client that acknowledges once a window, and the
// window on the log line.
func TestWindowNegotiation(t *testing.T) {
	file := testFiles["ipxe.efi"]
	text, err := io.ReadAll(netascii.ToReader(bytes.NewReader(testFiles["undionly.kpxe"])))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		req  []byte
		want rawResult // Size and SHA256 of data filled in below
		data []byte
		log  string
	}{
		{"asked 4", Config{}, request(1, "ipxe.efi", "octet", "blksize", "1468", "windowsize", "4"),
			rawResult{OACK: map[string]string{"blksize": "1468", "windowsize": "4"}, FirstLen: 1468, Blocks: len(file)/1468 + 1},
			file, "windowsize=4"},
		{"asked 100: MaxWindowSize", Config{}, request(1, "ipxe.efi", "octet", "windowsize", "100"),
			rawResult{OACK: map[string]string{"windowsize": "16"}, FirstLen: 512, Blocks: len(file)/512 + 1},
			file, "windowsize=16"},
		{"MaxWindowSize 1: lock step", Config{MaxWindowSize: 1}, request(1, "ipxe.efi", "octet", "windowsize", "4"),
			rawResult{OACK: map[string]string{"windowsize": "1"}, FirstLen: 512, Blocks: len(file)/512 + 1},
			file, "windowsize=1"},
		{"asked 0: ignored", Config{}, request(1, "ipxe.efi", "octet", "windowsize", "0"),
			rawResult{FirstLen: 512, Blocks: len(file)/512 + 1}, file, "windowsize=1"},
		{"asked abc: ignored", Config{}, request(1, "ipxe.efi", "octet", "blksize", "1468", "windowsize", "abc"),
			rawResult{OACK: map[string]string{"blksize": "1468"}, FirstLen: 1468, Blocks: len(file)/1468 + 1},
			file, "windowsize=1"},
		{"asked 70000: ignored", Config{}, request(1, "ipxe.efi", "octet", "windowsize", "70000"),
			rawResult{FirstLen: 512, Blocks: len(file)/512 + 1}, file, "windowsize=1"},
		// Loopback's MTU lets 65464 through.
		{"blksize 65464: window of 1", Config{MaxBlockSize: 65464}, request(1, "ipxe.efi", "octet", "blksize", "65464", "windowsize", "16"),
			rawResult{OACK: map[string]string{"blksize": "65464", "windowsize": "1"}, FirstLen: 65464, Blocks: len(file)/65464 + 1},
			file, "windowsize=1"},
		{"netascii is windowed too", Config{}, request(1, "undionly.kpxe", "netascii", "blksize", "1468", "windowsize", "8"),
			rawResult{OACK: map[string]string{"blksize": "1468", "windowsize": "8"}, FirstLen: 1468, Blocks: len(text)/1468 + 1},
			text, "windowsize=8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Timeout, tc.cfg.Retries = noTimeout, 1
			fx := start(t, tc.cfg)
			got := rawGet(t, fx.addr, tc.req)
			tc.want.Size, tc.want.SHA256 = len(tc.data), sha256.Sum256(tc.data)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("transfer (-want +got):\n%s", diff)
			}
			if lines := fx.logs.wait("tftp transfer", "result=ok", "bytes="+strconv.Itoa(len(tc.data)), tc.log); len(lines) != 1 {
				t.Errorf("no transfer line with %s:\n%s", tc.log, strings.Join(fx.logs.lines("tftp transfer"), "\n"))
			}
		})
	}
}

// noTimeout is the Timeout of transfers that never wait for one, sent
// once: longer than readPacket's 5 s, so a server that would stall fails
// the test instead of crawling on at a block per Timeout, and short
// enough for Serve to return within the fixture's 10 s.
const noTimeout = 6 * time.Second

// edk2Request is what edk2's PXE client sends for its real read (after the
// tsize probe), with PcdPxeTftpWindowSize 4.
var edk2Request = request(1, "ipxe.efi", "octet", "blksize", "1468", "windowsize", "4")

// ipxeBlocks is the number of 1468-byte blocks of ipxe.efi, the last one
// short; ipxeWindows the windows of 4 they take.
var (
	ipxeBlocks  = len(testFiles["ipxe.efi"])/1468 + 1
	ipxeWindows = (ipxeBlocks + 3) / 4
)

// startWindowed sends edk2Request to fx, checks the OACK and acknowledges
// it, and returns a client that takes the blocks that follow.
func startWindowed(t *testing.T, fx *fixture) *windowClient {
	t.Helper()
	conn := dialRaw(t, fx.addr, edk2Request)
	t.Cleanup(func() { _ = conn.Close() })
	p, tid := readPacket(t, conn)
	if binary.BigEndian.Uint16(p) != opOACK {
		t.Fatalf("got %x, want an OACK", p)
	}
	c := newWindowClient(t, conn)
	c.tid = tid
	c.options(parseOptions(p[2:]))
	if c.window != 4 {
		t.Fatalf("OACK %q: want windowsize 4", p[2:])
	}
	ack(t, conn, tid, 0)
	return c
}

// readData reads n DATA packets and fails unless they are the blocks from
// first on.
func readData(t *testing.T, c *windowClient, first uint16, n int) [][]byte {
	t.Helper()
	var ps [][]byte
	for i := range n {
		p, _ := readPacket(t, c.conn)
		wantData(t, p, first+uint16(i))
		ps = append(ps, p)
	}
	return ps
}

// wantFile fails unless c took all of ipxe.efi and the server logged the
// transfer with these datagram and ACK counts.
func wantFile(t *testing.T, fx *fixture, c *windowClient, datagrams, acked int) {
	t.Helper()
	file := testFiles["ipxe.efi"]
	size, sum := c.finish()
	if size != len(file) || sum != sha256.Sum256(file) {
		t.Fatalf("got %d bytes, want the %d of ipxe.efi", size, len(file))
	}
	want := "windowsize=4 duration="
	counts := fmt.Sprintf("result=ok mode=octet datagrams=%d acked=%d", datagrams, acked)
	if lines := fx.logs.wait("tftp transfer", "file=ipxe.efi", want, counts); len(lines) != 1 {
		t.Errorf("no transfer line with %q and %q:\n%s", want, counts, strings.Join(fx.logs.lines("tftp transfer"), "\n"))
	}
}

// TestWindowTransfer: with window 4 the server sends four blocks, waits,
// and goes on at each ACK of a window's end; nothing is sent twice.
func TestWindowTransfer(t *testing.T) {
	fx := start(t, Config{Timeout: 2 * time.Second})
	c := startWindowed(t, fx)
	first := readData(t, c, 1, 4)
	expectSilence(t, c.conn, 100*time.Millisecond) // the window's end
	for _, p := range first {
		c.take(p) // the fourth is acknowledged
	}
	wantFile(t, fx, c, 1+ipxeBlocks, 1+ipxeWindows)
	if c.acks != ipxeWindows {
		t.Errorf("client sent %d ACKs after ACK 0, want one a window: %d", c.acks, ipxeWindows)
	}
}

// TestWindowMissedBlock: a client that missed block 2 acknowledges block 1
// on each later block; the server sends again from block 2 at once, not
// after Timeout, and once, not once per ACK.
func TestWindowMissedBlock(t *testing.T) {
	fx := start(t, Config{Timeout: 3 * time.Second})
	c := startWindowed(t, fx)
	ps := readData(t, c, 1, 4)
	c.take(ps[0])
	// ps[1] is lost on the way.
	c.take(ps[2]) // ACK 1
	c.take(ps[3]) // ACK 1 again
	if c.acks != 2 {
		t.Fatalf("client sent %d ACKs, want 2 of block 1", c.acks)
	}
	sent := time.Now()
	again := readData(t, c, 2, 4)
	if d := time.Since(sent); d > time.Second {
		t.Errorf("blocks 2.. came %s after the ACK of 1; want at once, not after Timeout", d)
	}
	expectSilence(t, c.conn, 200*time.Millisecond) // the second ACK 1 is ignored
	for _, p := range again {
		c.take(p) // the fourth, block 5, is acknowledged
	}
	// Blocks 2, 3 and 4 went twice; ACK 0, ACK 1, ACK 5 and one a window
	// from block 6 on moved the transfer.
	wantFile(t, fx, c, 1+ipxeBlocks+3, 3+(ipxeBlocks-5+3)/4)
}

// TestWindowTimeout: without an ACK the server sends the window again from
// its first unacknowledged block after Timeout, and gives up after
// Retries sends.
func TestWindowTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	t.Run("lost ACK", func(t *testing.T) {
		fx := start(t, Config{Timeout: timeout})
		c := startWindowed(t, fx)
		for _, p := range readData(t, c, 1, 4) {
			c.take(p)
		}
		sent := time.Now()
		readData(t, c, 5, 4) // the client's ACK 8 is lost
		for _, p := range readData(t, c, 5, 4) {
			c.take(p)
		}
		if d := time.Since(sent); d < timeout-10*time.Millisecond {
			t.Errorf("blocks 5..8 came again %s after ACK 4, before Timeout %s", d, timeout)
		}
		wantFile(t, fx, c, 1+ipxeBlocks+4, 1+ipxeWindows)
	})
	t.Run("client gone", func(t *testing.T) {
		fx := start(t, Config{Timeout: 100 * time.Millisecond, Retries: 2})
		c := startWindowed(t, fx)
		readData(t, c, 1, 4)
		readData(t, c, 1, 4)
		expectSilence(t, c.conn, 300*time.Millisecond)
		if lines := fx.logs.wait("tftp transfer", "file=ipxe.efi", "result=timeout", "datagrams=9 acked=1"); len(lines) != 1 {
			t.Errorf("no timeout line with 9 datagrams:\n%s", strings.Join(fx.logs.lines("tftp transfer"), "\n"))
		}
	})
}

// TestWindowIgnoresOtherAcks: ACKs of blocks already acknowledged, of
// blocks not sent yet and from another port do not move the transfer or
// make the server send anything (the Sorcerer's Apprentice bug), but for
// the first repeat of the ACK before the window (TestWindowMissedFirst).
func TestWindowIgnoresOtherAcks(t *testing.T) {
	fx := start(t, Config{Timeout: 2 * time.Second})
	c := startWindowed(t, fx)
	for _, p := range readData(t, c, 1, 4) {
		c.take(p)
	}
	readData(t, c, 5, 4)
	ack(t, c.conn, c.tid, 4) // blocks 5..8 again, once
	ps := readData(t, c, 5, 4)
	// However often a client repeats ACK 4, the window went again once:
	// four repeats are the echoes of its copies, and then it has not moved.
	for _, block := range []uint16{4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 0, 65535, 9, 12} {
		ack(t, c.conn, c.tid, block)
	}
	stray := dialRaw(t, c.tid.String(), []byte{0, opACK, 0, 8})
	defer stray.Close()
	expectSilence(t, c.conn, 200*time.Millisecond)
	for _, p := range ps {
		c.take(p)
	}
	wantFile(t, fx, c, 1+ipxeBlocks+4, 1+ipxeWindows)
}

// TestWindowRepeatSparesLastTry: with no send left a repeated ACK is
// ignored, not taken as the end of the transfer: Timeout ends it if
// nothing moves it. Here the repeat goes unanswered and then the ACK of
// the whole window goes on with the transfer; and an edk2 client that
// got block 2 before block 1 (it threw block 2 away, repeats ACK 0, then
// ACKs 1 twice for blocks 3 and 4) gets the rest of the window again on
// its first ACK 1 and finishes.
func TestWindowRepeatSparesLastTry(t *testing.T) {
	t.Run("repeat, then the window", func(t *testing.T) {
		fx := start(t, Config{Timeout: noTimeout, Retries: 1})
		c := startWindowed(t, fx)
		ps := readData(t, c, 1, 4)
		ack(t, c.conn, c.tid, 0)
		expectSilence(t, c.conn, 200*time.Millisecond)
		for _, p := range ps {
			c.take(p)
		}
		wantFile(t, fx, c, 1+ipxeBlocks, 1+ipxeWindows)
	})
	t.Run("edk2, block 1 late", func(t *testing.T) {
		fx := start(t, Config{Timeout: noTimeout, Retries: 1})
		c := startWindowed(t, fx)
		ps := readData(t, c, 1, 4)
		c.take(ps[1]) // ACK 0
		c.take(ps[0]) // taken
		c.take(ps[2]) // ACK 1: blocks 2..5 again
		c.take(ps[3]) // ACK 1, an echo
		wantFile(t, fx, c, 1+ipxeBlocks+3, 2+(ipxeBlocks+2)/4)
	})
}

// TestWindowMissedFirst: a client that missed the first block of a window
// acknowledges the block before it again, as edk2 does; the server sends
// the window again at once, not after Timeout, and only once however many
// such ACKs come.
func TestWindowMissedFirst(t *testing.T) {
	fx := start(t, Config{Timeout: 3 * time.Second})
	c := startWindowed(t, fx)
	ps := readData(t, c, 1, 4)
	// Block 1 is lost on the way: blocks 2..4 each make the client
	// acknowledge block 0 again.
	for _, p := range ps[1:] {
		c.take(p)
	}
	if c.acks != 3 {
		t.Fatalf("client sent %d ACKs, want three more of block 0", c.acks)
	}
	sent := time.Now()
	again := readData(t, c, 1, 4)
	if d := time.Since(sent); d > time.Second {
		t.Errorf("blocks 1.. came %s after the repeated ACK 0; want at once, not after Timeout", d)
	}
	expectSilence(t, c.conn, 200*time.Millisecond) // the other repeats are ignored
	for _, p := range again {
		c.take(p)
	}
	wantFile(t, fx, c, 1+ipxeBlocks+4, 1+ipxeWindows)
}

// TestWindowReordered: a block that comes late rather than never (a
// network that reorders) costs the blocks in flight once, not the rest of
// the transfer. The client takes block 3 before block 2 and throws it
// away: it acknowledges block 1, takes block 2, and acknowledges block 2
// on block 4; blocks 2..4 go again at once, and the copy of block 2 the
// client then has twice makes it repeat ACK 2, which sends nothing.
func TestWindowReordered(t *testing.T) {
	fx := start(t, Config{Timeout: 3 * time.Second})
	c := startWindowed(t, fx)
	ps := readData(t, c, 1, 4)
	c.take(ps[0])
	c.take(ps[2]) // ACK 1
	c.take(ps[1])
	c.take(ps[3]) // ACK 2
	if c.acks != 2 {
		t.Fatalf("client sent %d ACKs, want ACK 1 and ACK 2", c.acks)
	}
	sent := time.Now()
	again := readData(t, c, 2, 5) // 2..4 again and 5 on ACK 1; only 6 on ACK 2
	if d := time.Since(sent); d > time.Second {
		t.Errorf("blocks 2.. came %s after the ACK of 1; want at once, not after Timeout", d)
	}
	c.take(again[0]) // block 2 twice: ACK 2 again
	expectSilence(t, c.conn, 200*time.Millisecond)
	for _, p := range again[1:] {
		c.take(p) // ACK 6
	}
	// Blocks 2, 3 and 4 went twice; ACK 0, 1, 2 and 6 and one a window
	// from block 7 on moved the transfer.
	wantFile(t, fx, c, 1+ipxeBlocks+3, 4+(ipxeBlocks-6+3)/4)
}

// TestWindowDuplicated: a network that delivers a window twice makes the
// client repeat its ACK of the window's end for each copy. The first
// repeat sends the next window again at once (the client may have missed
// its first block), and that once: the copies the client then has make it
// repeat again, and those repeats are taken as such, so every later
// window goes once.
func TestWindowDuplicated(t *testing.T) {
	fx := start(t, Config{Timeout: 3 * time.Second})
	c := startWindowed(t, fx)
	ps := readData(t, c, 1, 4)
	for _, p := range ps {
		c.take(p) // ACK 4
	}
	for _, p := range ps {
		c.take(p) // ACK 4 again, four times
	}
	if c.acks != 5 {
		t.Fatalf("client sent %d ACKs, want five of block 4", c.acks)
	}
	// Blocks 5..8 went twice; ACK 0 and one a window moved the transfer.
	wantFile(t, fx, c, 1+ipxeBlocks+4, 1+ipxeWindows)
}

// TestWindowUnreliableNetwork: over a network that reorders, duplicates
// and drops DATA, an edk2 client still gets the whole file, and the server
// sends each block not much more than once: no loss or late block sets
// off a run of windows sent twice. Each seed is one transfer; the network
// is the client's side of it, so the server sees only what edk2 would
// send back.
func TestWindowUnreliableNetwork(t *testing.T) {
	const (
		reorder   = 0.03 // a block held back behind the next one
		duplicate = 0.01
		drop      = 0.01
		seeds     = 12
	)
	fx := start(t, Config{Timeout: 100 * time.Millisecond, Retries: 20})
	total, began := 0, time.Now()
	for seed := range uint64(seeds) {
		rnd := rand.New(rand.NewPCG(seed, 15))
		c := startWindowed(t, fx)
		var held []byte
		deliver := func(p []byte) (last bool) {
			_, last = c.take(p)
			return last
		}
		for done := false; !done; {
			p, from := readPacket(t, c.conn)
			if binary.BigEndian.Uint16(p) != opDATA {
				t.Fatalf("seed %d: got %x, want DATA", seed, p[:4])
			}
			c.tid = from
			switch r := rnd.Float64(); {
			case r < drop:
				continue
			case r < drop+duplicate:
				done = deliver(p) || deliver(p)
			case r < drop+duplicate+reorder && held == nil:
				held = p
				continue
			default:
				done = deliver(p)
			}
			if held != nil && !done {
				done, held = deliver(held), nil
			}
		}
		size, sum := c.sum()
		if file := testFiles["ipxe.efi"]; size != len(file) || sum != sha256.Sum256(file) {
			t.Fatalf("seed %d: got %d bytes, want the %d of ipxe.efi", seed, size, len(file))
		}
		lines := fx.logs.wait("tftp transfer", "file=ipxe.efi", "result=ok", fmt.Sprintf("remote=%s", c.conn.LocalAddr()))
		if len(lines) != 1 {
			t.Fatalf("seed %d: no transfer line for %s", seed, c.conn.LocalAddr())
		}
		var datagrams int
		if _, err := fmt.Sscanf(lines[0][strings.Index(lines[0], "datagrams="):], "datagrams=%d", &datagrams); err != nil {
			t.Fatalf("seed %d: %v in %q", seed, err, lines[0])
		}
		t.Logf("seed %d: %d datagrams for %d blocks", seed, datagrams, ipxeBlocks)
		total += datagrams - 1 // the OACK
	}
	// About 5 % of the blocks are lost, late or doubled, and each such
	// event costs about a window sent again, 4 blocks: some 20 % more.
	// 30 % leaves room; a server that cascades sends 4-7 times as much.
	if limit := seeds * ipxeBlocks * 13 / 10; total > limit {
		t.Errorf("%d DATA datagrams for %d transfers of %d blocks, want at most %d", total, seeds, ipxeBlocks, limit)
	}
	// A loss the sender misses costs a 100 ms Timeout: some 35 in all
	// here (4 s), where a sender that stalled until its Retries ran out
	// would take 2 s a time.
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("the %d transfers took %s, want under 10 s: losses wait for Timeout", seeds, took)
	}
}

// TestWindowExactMultiple: a file whose size is a multiple of blksize ends
// with an empty block, here the first and only one of its window.
func TestWindowExactMultiple(t *testing.T) {
	fx := start(t, Config{Timeout: noTimeout, Retries: 1})
	file := testFiles["exact.bin"]
	for _, blksize := range []int{1468, 512} {
		for _, window := range []int{4, 16} {
			t.Run(fmt.Sprintf("blksize %d window %d", blksize, window), func(t *testing.T) {
				b, w := strconv.Itoa(blksize), strconv.Itoa(window)
				got := rawGet(t, fx.addr, request(1, "exact.bin", "octet", "blksize", b, "windowsize", w))
				want := rawResult{OACK: map[string]string{"blksize": b, "windowsize": w}, FirstLen: blksize,
					Blocks: len(file)/blksize + 1, Size: len(file), SHA256: sha256.Sum256(file)}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("transfer (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestWindowWrap sends a file of more than 65535 blocks with a window of 6
// that spans the wrap of block numbers (65533 … 65535, 0, 1, 2), and loses
// block 1 on its first send: the client's ACK of block 0, the fourth of
// that window, must bring blocks 1 and 2 back at once. The sender runs
// directly, so the 32 MiB file is generated as it is read.
func TestWindowWrap(t *testing.T) {
	const size = 65540*512 + 100 // 65541 blocks
	file := func() io.Reader { return io.LimitReader(rand.NewChaCha8([32]byte{7}), size) }
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conn := dialRaw(t, srv.LocalAddr().String(), nil)
	defer conn.Close()
	x := &sender{conn: srv, to: conn.LocalAddr().(*net.UDPAddr), timeout: noTimeout, retries: 1,
		blksize: 512, window: 6}
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := x.run(nil, file(), []string{"windowsize", "6"})
		done <- result{n, err}
	}()
	p, tid := readPacket(t, conn)
	if binary.BigEndian.Uint16(p) != opOACK {
		t.Fatalf("got %x, want an OACK", p)
	}
	c := newWindowClient(t, conn)
	c.tid = tid
	c.options(parseOptions(p[2:]))
	ack(t, conn, tid, 0)
	var lost bool
	for {
		p, _ := readPacket(t, conn)
		if block := binary.BigEndian.Uint16(p[2:]); block == 1 && c.next == 1 && c.size > 0 && !lost {
			lost = true
			continue
		}
		if _, last := c.take(p); last {
			break
		}
	}
	res := <-done
	h := sha256.New()
	if _, err := io.Copy(h, file()); err != nil {
		t.Fatal(err)
	}
	gotSize, gotSum := c.sum()
	if res.err != nil || res.n != size || gotSize != size || !bytes.Equal(gotSum[:], h.Sum(nil)) {
		t.Fatalf("sent %d bytes (%v), got %d; want %d, same digest", res.n, res.err, gotSize, size)
	}
	// The OACK, every block, and blocks 1 and 2 again.
	if !lost || x.sent != 1+65541+2 {
		t.Errorf("sent %d datagrams, want %d", x.sent, 1+65541+2)
	}
}
