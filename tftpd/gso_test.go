package tftpd

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestGSORun: a run is blocks of one size, ended by a shorter one or by
// the kernel's bounds (64 segments, one UDP datagram's payload).
func TestGSORun(t *testing.T) {
	sizes := func(ls ...int) [][]byte {
		var ps [][]byte
		for _, l := range ls {
			ps = append(ps, make([]byte, l))
		}
		return ps
	}
	repeat := func(l, n int) []int {
		var ls []int
		for range n {
			ls = append(ls, l)
		}
		return ls
	}
	tests := []struct {
		name string
		pkts [][]byte
		off  bool
		want int
	}{
		{"a window of 4", sizes(1472, 1472, 1472, 1472), false, 4},
		{"the file's last block ends it", sizes(1472, 1472, 100), false, 3},
		{"a shorter one ends a run", sizes(1472, 100, 1472), false, 2},
		{"a longer one cannot follow", sizes(100, 1472), false, 1},
		{"one block: a plain send", sizes(1472), false, 1},
		{"an empty last block (4 bytes)", sizes(516, 516, 4), false, 3},
		{"44 blocks of 1472 fit a datagram, 45 do not", sizes(repeat(1472, 50)...), false, 44},
		{"63 segments at most", sizes(repeat(516, 100)...), false, 63},
		{"off", sizes(1472, 1472), true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := (&gso{off: tc.off}).run(tc.pkts); got != tc.want {
				t.Errorf("run = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestGSOWindowArrivesAsBlocks: a windowed transfer on loopback goes out
// in segmented sends, and the client still receives one datagram per
// block, each 4+blksize bytes but the last, and the whole file; where the
// kernel refuses them (a socket without UDP checksums, SO_NO_CHECK, gets
// EINVAL), every block goes on its own, once. Each case runs with the
// runtime's sendmsg and with the raw one (udpIO.sendSegments), which
// transfers use: a send the kernel refuses turns segmentation off without
// an error, so a raw sendmsg built wrong would go unnoticed but for the
// count of segmented sends.
func TestGSOWindowArrivesAsBlocks(t *testing.T) {
	file := testFiles["ipxe.efi"]
	// gsoSends is how many segmented sends windows of window blocks take:
	// runs of up to gsoMaxSegments, a run of one going on its own.
	gsoSends := func(blksize, window int) int {
		n := 0
		for left := len(file)/blksize + 1; left > 0; left -= window {
			w := min(left, window)
			n += w / gsoMaxSegments
			if w%gsoMaxSegments >= 2 {
				n++
			}
		}
		return n
	}
	tests := []struct {
		name            string
		blksize, window int
		noCheck         bool
		sends           int
	}{
		{"windows of 4, as edk2 asks", 1468, 4, false, gsoSends(1468, 4)},
		{"windows of 64 small blocks: runs of 63", 512, 64, false, gsoSends(512, 64)},
		{"refused: a send per block", 1468, 4, true, 0},
	}
	for _, tc := range tests {
		for _, raw := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, raw calls %v", tc.name, raw), func(t *testing.T) {
				srv, cli := socketPair(t)
				if tc.noCheck {
					rc, err := srv.SyscallConn()
					if err != nil {
						t.Fatal(err)
					}
					var serr error
					if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1) }); err != nil || serr != nil {
						t.Fatal(err, serr)
					}
				}
				to := cli.LocalAddr().(*net.UDPAddr)
				x := &sender{conn: srv, to: to, timeout: noTimeout, retries: 1, blksize: tc.blksize, window: tc.window, gso: newGSO(srv, to)}
				if x.gso.off {
					t.Fatal("segmented sends are off for an IPv4 client of an IPv4 socket")
				}
				if raw {
					if x.io = newUDPIO(srv, to); x.io == nil {
						t.Fatal("no raw calls for an IPv4 client of an IPv4 socket")
					}
					x.gso.io = x.io
				}
				type result struct {
					n   int64
					err error
				}
				done := make(chan result, 1)
				go func() {
					n, err := x.run(make(chan struct{}), bytes.NewReader(file), nil)
					done <- result{n, err}
				}()
				c := newWindowClient(t, cli)
				c.blksize, c.window, c.tid = tc.blksize, tc.window, srv.LocalAddr().(*net.UDPAddr)
				for {
					p, _ := readPacket(t, cli)
					if len(p) != 4+tc.blksize && len(p)-4 != len(file)%tc.blksize {
						t.Fatalf("a datagram of %d bytes: want one block, %d bytes", len(p), 4+tc.blksize)
					}
					if took, last := c.take(p); !took {
						t.Fatalf("block %d out of order, or twice", c.next)
					} else if last {
						break
					}
				}
				select {
				case r := <-done:
					if r.err != nil || r.n != int64(len(file)) {
						t.Fatalf("run = %d, %v; want %d, nil", r.n, r.err, len(file))
					}
				case <-time.After(5 * time.Second):
					t.Fatal("run did not end after the last ACK")
				}
				if size, sum := c.sum(); size != len(file) || sum != sha256.Sum256(file) {
					t.Fatalf("got %d bytes, want the %d of ipxe.efi", size, len(file))
				}
				expectSilence(t, cli, 50*time.Millisecond) // nothing twice
				blocks := len(file)/tc.blksize + 1
				if x.sent != blocks || x.gso.sends != tc.sends || x.gso.off != tc.noCheck {
					t.Errorf("%d datagrams in %d segmented sends, off %v; want %d in %d, off %v",
						x.sent, x.gso.sends, x.gso.off, blocks, tc.sends, tc.noCheck)
				}
			})
		}
	}
}
