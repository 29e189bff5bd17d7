package tftpd

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// readSyscalls is this process's count of read system calls on files and
// pipes so far (syscr of /proc/self/io; a UDP socket's recvfrom is not
// one of them).
func readSyscalls(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no read counter here: %v", err)
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("syscr: ")); ok {
			n, err := strconv.Atoi(string(v))
			if err != nil {
				t.Fatalf("/proc/self/io: %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/self/io has no syscr line:\n%s", b)
	return 0
}

// TestFileReadInWindows: a windowed transfer reads its file a window of
// blocks per system call (readv), not one call per block. In a boot storm
// 250 UEFI machines each fetch an 850 KB ipxe.efi in 1468-byte blocks,
// windowsize 4; read one block at a time, those reads were a tenth of the
// server's CPU while machines started (BENCHMARKS.md, section G, "Fewer
// reads per first stage"). The data must still be the file, to its last
// (maybe empty) block.
func TestFileReadInWindows(t *testing.T) {
	fx := start(t, Config{})
	for _, tc := range []struct {
		file   string
		window int
	}{
		{"ipxe.efi", 4},  // edk2's windowsize
		{"ipxe.efi", 16}, // the largest granted by default
		{"exact.bin", 4}, // 512 full blocks, then an empty one
		{"undionly.kpxe", 3},
	} {
		t.Run(fmt.Sprintf("%s windowsize %d", tc.file, tc.window), func(t *testing.T) {
			data := testFiles[tc.file]
			blocks := len(data)/1468 + 1
			before := readSyscalls(t)
			got := rawGet(t, fx.addr, request(1, tc.file, "octet", "blksize", "1468", "windowsize", strconv.Itoa(tc.window)))
			if got.Size != len(data) || got.SHA256 != sha256.Sum256(data) {
				t.Fatalf("got %d bytes (SHA-256 %x), want %d (%x); %+v", got.Size, got.SHA256, len(data), sha256.Sum256(data), got)
			}
			if line := fx.logs.wait("tftp transfer", "file="+tc.file+" ", "result=ok", "windowsize="+strconv.Itoa(tc.window)); len(line) == 0 {
				t.Fatal("no transfer log line")
			}
			reads := readSyscalls(t) - before
			if reads < 1 {
				t.Skipf("syscr does not count this process's reads here (%d)", reads)
			}
			// A read per window, the one that finds the end of the file,
			// the first look at /proc/self/io's own end, and room for
			// whatever else the process read meanwhile. The old sender
			// made a read per block.
			if limit := blocks/tc.window + 6; reads > limit {
				t.Errorf("%d read calls for %d blocks in windows of %d, want at most %d", reads, blocks, tc.window, limit)
			}
			t.Logf("%d read calls for %d blocks in windows of %d", reads, blocks, tc.window)
		})
	}
}

// TestReadFullShortReads: readFull fills its buffers in order across
// readv calls that return less than asked (a pipe, a signal), stops at
// the end of the file, and passes a read error on with what it read.
func TestReadFullShortReads(t *testing.T) {
	src := noise(10_000, 9)
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		size     int // bytes the source has
		per      int // at most this many bytes a call
		failAt   int // the call that fails (0: none)
		want     int
		wantErr  error
		bufSizes []int
	}{
		{"one call", 10_000, 1 << 20, 0, 3 * 1468, nil, []int{1468, 1468, 1468}},
		{"short calls", 10_000, 1000, 0, 3 * 1468, nil, []int{1468, 1468, 1468}},
		{"calls ending on a buffer", 10_000, 1468, 0, 3 * 1468, nil, []int{1468, 1468, 1468}},
		{"end of file mid-buffer", 2000, 700, 0, 2000, nil, []int{1468, 1468, 1468}},
		{"end of file on a buffer", 1468, 1468, 0, 1468, nil, []int{1468, 1468}},
		{"error after some", 10_000, 1000, 3, 2000, boom, []int{1468, 1468, 1468}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off, calls := 0, 0
			readv := func(bufs [][]byte) (int, error) {
				if calls++; calls == tc.failAt {
					return 0, boom
				}
				n := 0
				for _, b := range bufs {
					k := copy(b, src[off:min(tc.size, off+tc.per-n)])
					off, n = off+k, n+k
					if k < len(b) {
						break
					}
				}
				return n, nil
			}
			var bufs, orig [][]byte
			for _, n := range tc.bufSizes {
				b := make([]byte, n)
				bufs, orig = append(bufs, b), append(orig, b)
			}
			got, err := readFull(readv, bufs)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("readFull = %d, %v; want %d, %v", got, err, tc.want, tc.wantErr)
			}
			// The buffers, in order, hold the source's first got bytes.
			var filled []byte
			for _, b := range orig {
				filled = append(filled, b...)
			}
			if !bytes.Equal(filled[:got], src[:got]) {
				t.Errorf("the buffers do not hold the source's first %d bytes in order", got)
			}
		})
	}
}

// TestFileVecAllocatesNothing: a windowed transfer's reads make no
// garbage: the iovecs and the function handed to RawConn.Read are the
// fileVec's own, made once per transfer.
func TestFileVecAllocatesNothing(t *testing.T) {
	p := t.TempDir() + "/f"
	if err := os.WriteFile(p, noise(4*1468+10, 7), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	read := newFileVec(rc, 4).read
	bufs := make([][]byte, 4)
	slots := make([]byte, 4*1468)
	got := 0
	allocs := testing.AllocsPerRun(50, func() {
		for i := range bufs {
			bufs[i] = slots[i*1468 : (i+1)*1468]
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		got, err = readFull(read, bufs)
	})
	if err != nil || got != len(slots) {
		t.Fatalf("readFull = %d, %v; want %d", got, err, len(slots))
	}
	if allocs != 0 {
		t.Errorf("%v allocations per window read, want 0", allocs)
	}
}

// TestFileChangedMidTransfer: a file that ends before the size it had at
// open, or runs past it, ends the transfer with an ERROR, logged and
// counted as an error. Its last block would otherwise pass for the end of
// the file: the client would take a short or a changed file as whole and
// the server would log it ok. A preadv2 that answers 0 for data not
// cached (Linux 5.9 and 5.10) looks the same to the sender.
func TestFileChangedMidTransfer(t *testing.T) {
	size := len(testFiles["undionly.kpxe"])
	for _, tc := range []struct {
		name   string
		change func(path string) error
		cause  string
	}{
		{"cut short", func(path string) error { return os.Truncate(path, 5000) },
			fmt.Sprintf("the file ended after 5000 bytes; it had %d at open", size)},
		{"grown", func(path string) error { return os.Truncate(path, int64(size)+1000) },
			fmt.Sprintf("the file runs past the %d bytes it had at open", size)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := start(t, Config{})
			conn := dialRaw(t, fx.addr, request(1, "undionly.kpxe", "octet"))
			defer conn.Close()
			p, tid := readPacket(t, conn) // the file is open, and only block 1 read
			wantData(t, p, 1)
			if err := tc.change(filepath.Join(fx.dir, "undionly.kpxe")); err != nil {
				t.Fatal(err)
			}
			got := rawDriveFrom(t, conn, p, tid)
			if got.ErrMsg != errReadSource.Error() {
				t.Fatalf("got %d bytes, ERROR %q; want ERROR %q", got.Size, got.ErrMsg, errReadSource)
			}
			if l := fx.logs.wait("tftp transfer", "file=undionly.kpxe", "result=error", tc.cause); len(l) != 1 {
				t.Errorf("no error line with cause %q:\n%s", tc.cause, strings.Join(fx.logs.lines("tftp transfer"), "\n"))
			}
			waitMetric(t, fx, `siteboot_tftp_transfers_total{result="error"}`, 1)
		})
	}
}
