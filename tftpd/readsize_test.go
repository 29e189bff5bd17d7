package tftpd

import (
	"bytes"
	"os"
	"strconv"
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

// TestFileReadInChunks: a transfer reads its file a few blocks per
// system call, not one call per block. In a boot storm 250 UEFI machines
// each fetch an 850 KB ipxe.efi in 1468-byte blocks; read one block at a
// time, those reads were a tenth of the server's CPU while machines
// started (BENCHMARKS.md, "The ramp on the shaped link").
func TestFileReadInChunks(t *testing.T) {
	fx := start(t, Config{})
	const name = "ipxe.efi"
	size := len(testFiles[name])
	blocks := size/1468 + 1
	before := readSyscalls(t)
	got, err := pinGet(fx.addr, name, 1468, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.Size != int64(size) {
		t.Fatalf("fetched %d bytes, want %d", got.Size, size)
	}
	if line := fx.logs.wait("tftp transfer", "file="+name+" ", "result=ok", "bytes="+strconv.Itoa(size)); len(line) == 0 {
		t.Fatal("no transfer log line")
	}
	reads := readSyscalls(t) - before - 1 // the second look at /proc/self/io
	// One read per 16 KiB is 19 for this file, with room for whatever
	// else the process read meanwhile. One per block is 205.
	if limit := blocks / 4; reads > limit {
		t.Errorf("%d read calls for %d blocks of %s, want at most %d", reads, blocks, name, limit)
	}
	t.Logf("%d read calls for %d blocks", reads, blocks)
}
