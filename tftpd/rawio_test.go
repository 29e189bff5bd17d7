package tftpd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/siteboot/siteboot/internal/metrictest"
	"github.com/siteboot/siteboot/internal/monitortest"
	"golang.org/x/sys/unix"
)

// TestLockStepLeavesMonitorAsleep: lock-step transfers make their
// per-block socket and file calls without waking the runtime's monitor.
// Made as runtime system calls, each woke it whenever every Go processor
// was idle between ACKs, and a woken monitor polls every 20 µs for a
// millisecond: in the TFTP benchmark that was a fifth of the server's CPU
// and made it slower than dnsmasq (BENCHMARKS.md, "The runtime's
// monitor"). The clients are curl processes, so that the only Go code
// here is the server's; the same transfers with the runtime's calls
// (rawCalls false) are the comparison.
func TestLockStepLeavesMonitorAsleep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 16 curl transfers of 2 MiB")
	}
	curl := curlPath(t)
	if v, err := exec.Command(curl, "-V").Output(); err != nil || !bytes.Contains(v, []byte(" tftp")) {
		t.Skipf("this curl does not speak TFTP (%v):\n%s", err, v)
	}
	fx := start(t, Config{})
	const clients = 8
	data := testFiles["big.bin"]
	blocks := clients * (len(data)/512 + 1)
	done := 1.0 // the warm-up transfer
	run := func(raw bool) float64 {
		rawCalls.Store(raw)
		defer rawCalls.Store(true)
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var cmds []*exec.Cmd
		for i := range clients {
			cmd := exec.CommandContext(ctx, curl, "-sS", "--fail", "--tftp-blksize", "512",
				"-o", filepath.Join(dir, strconv.Itoa(i)), "tftp://"+fx.addr+"/big.bin")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, cmd)
		}
		// Counted from the last start to the last ACK; waiting for the
		// transfers reads metrics and sleeps, which makes no system calls.
		before := monitortest.Sleeps(t)
		done += clients
		key := `siteboot_tftp_transfers_total{result="ok"}`
		for metrictest.Values(t, fx.reg)[key] < done {
			if ctx.Err() != nil {
				t.Fatalf("%s = %v after a minute, want %v", key, metrictest.Values(t, fx.reg)[key], done)
			}
			time.Sleep(100 * time.Millisecond)
		}
		woke := monitortest.Sleeps(t) - before
		for i, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Fatalf("curl %d: %v", i, err)
			}
			got, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)))
			if err != nil || sha256.Sum256(got) != sha256.Sum256(data) {
				t.Fatalf("curl %d: got %d bytes, not the file (%v)", i, len(got), err)
			}
		}
		return float64(woke) / float64(blocks)
	}
	// A garbage collection wakes the monitor too (as it restarts the
	// world); none runs while this measures.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	runtimeCalls := run(false)
	rawRun := run(true)
	t.Logf("monitor sleeps per block: %.4f with runtime system calls, %.4f with raw ones (%d blocks each)", runtimeCalls, rawRun, blocks)
	// Transfers' set-up and the clients' exits wake it a few times in
	// either run, 0.005 to 0.016 per block here (the more, the busier
	// the machine); the runtime's calls woke it 0.02 to 0.25 times per
	// block (0.2 in the TFTP benchmark).
	if rawRun > 0.025 && rawRun > runtimeCalls/3 {
		t.Errorf("monitor sleeps per block: %.4f with raw calls, want at most a third of the %.4f with runtime system calls (or 0.025)", rawRun, runtimeCalls)
	}
}

// TestTransfersOverIPv6: the raw calls address an IPv6 client (a
// sockaddr_in6 of their own), in lock step and in windows (segmented
// sends), and ignore an ACK from another port of the client's address.
func TestTransfersOverIPv6(t *testing.T) {
	probe, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	probe.Close()
	fx := startOn(t, Config{Timeout: 400 * time.Millisecond, Retries: 3}, net.IPv6loopback)
	data := testFiles["ipxe.efi"]
	for _, opts := range [][]string{nil, {"blksize", "1468"}, {"blksize", "1468", "windowsize", "4"}} {
		got := rawGet(t, fx.addr, request(1, "ipxe.efi", "octet", opts...))
		if got.Size != len(data) || got.SHA256 != sha256.Sum256(data) {
			t.Fatalf("options %v: got %d bytes (SHA-256 %x), want %d; %+v", opts, got.Size, got.SHA256, len(data), got)
		}
	}
	conn := dialRaw(t, fx.addr, request(1, "ipxe.efi", "octet"))
	defer conn.Close()
	p, tid := readPacket(t, conn)
	wantData(t, p, 1)
	if tid.IP.To4() != nil {
		t.Fatalf("the transfer answered from %v, want an IPv6 address", tid)
	}
	stray := dialRaw(t, tid.String(), []byte{0, opACK, 0, 1})
	defer stray.Close()
	p, _ = readPacket(t, conn) // the retransmission after Timeout: the stray ACK moved nothing
	wantData(t, p, 1)
	ack(t, conn, tid, 1)
	p, _ = readPacket(t, conn)
	wantData(t, p, 2)
	if _, err := conn.WriteToUDP([]byte("\x00\x05\x00\x00done\x00"), tid); err != nil {
		t.Fatal(err)
	}
}

// TestKernelAtLeast reads the running kernel's release: this one is past
// 2.6 and short of 999.
func TestKernelAtLeast(t *testing.T) {
	if !kernelAtLeast(2, 6) || !kernelAtLeast(3, 0) {
		t.Error("kernelAtLeast(2, 6) or (3, 0) = false on a kernel this code runs on")
	}
	if kernelAtLeast(999, 0) {
		t.Error("kernelAtLeast(999, 0) = true")
	}
}

// TestFileVecReadsWhatIsNotCached: a block the page cache does not hold
// (preadv2 with RWF_NOWAIT answers EAGAIN) is read the ordinary way, not
// reported as an error or as the end of the file.
func TestFileVecReadsWhatIsNotCached(t *testing.T) {
	if !nowaitReads {
		t.Skip("this kernel (before 5.9) reads every block the ordinary way")
	}
	data := noise(64<<10, 7)
	p := filepath.Join(t.TempDir(), "cold.bin")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Written back and dropped from the page cache.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Skipf("fadvise: %v", err)
	}
	probe := make([]byte, 512)
	if _, err := unix.Preadv2(int(f.Fd()), [][]byte{probe}, 0, unix.RWF_NOWAIT); err != unix.EAGAIN {
		t.Skipf("the page cache still answers (preadv2 RWF_NOWAIT: %v); nothing to fall back from", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	v := newFileVec(rc, 4)
	got := make([]byte, 0, len(data))
	for {
		bufs := [][]byte{make([]byte, 1468), make([]byte, 1468), make([]byte, 1468), make([]byte, 1468)}
		n, err := readFull(v.read, slices.Clone(bufs)) // it moves its copy's starts on a short read
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		for _, b := range bufs {
			k := min(n, len(b))
			got, n = append(got, b[:k]...), n-k
		}
		if len(got) >= len(data) || n < 0 {
			break
		}
		if len(got)%(4*1468) != 0 {
			break // a short read: the end
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, not the file's %d", len(got), len(data))
	}
}
