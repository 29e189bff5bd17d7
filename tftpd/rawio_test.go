package tftpd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
	// block (0.2 in the TFTP benchmark). Below 0.02 the comparison run
	// did not wake the monitor either (a machine whose processors were
	// never all idle), and the raw run's count says nothing.
	if runtimeCalls < 0.02 {
		t.Skipf("the runtime's calls woke the monitor %.4f times per block, under 0.02: nothing to compare the raw calls with", runtimeCalls)
	}
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
	strayMovedNothing(t, conn, tid)
}

// strayMovedNothing: after a stranger's ACK 1 to the transfer at tid, the
// server sends DATA 1 again (the stray moved nothing), and the client's
// own ACK 1 brings DATA 2; then the client ends the transfer.
func strayMovedNothing(t *testing.T, conn *net.UDPConn, tid *net.UDPAddr) {
	t.Helper()
	p, _ := readPacket(t, conn) // the retransmission after Timeout
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

// TestParseRelease: the releases distributions and builders write, taken
// by their major and minor numbers, compared as numbers (5.10 is after
// 5.9, which a comparison of strings gets wrong); anything else is not a
// release, and no kernel is taken to be new enough by it.
func TestParseRelease(t *testing.T) {
	type parsed struct {
		Major, Minor int
		OK           bool
		From5_9      bool // releaseAtLeast(release, 5, 9)
		From5_11     bool
	}
	for _, tc := range []struct {
		release string
		want    parsed
	}{
		{"5.10.0-23-amd64", parsed{5, 10, true, true, false}},
		{"5.9", parsed{5, 9, true, true, false}},
		{"5.8.18-100.fc31.x86_64", parsed{5, 8, true, false, false}},
		{"5.11.0", parsed{5, 11, true, true, true}},
		{"6.1-rc1", parsed{6, 1, true, true, true}},
		{"6.18.44-fc-v1294", parsed{6, 18, true, true, true}},
		{"4.19.0", parsed{4, 19, true, false, false}},
		{"4", parsed{}},
		{"5.", parsed{}},
		{"", parsed{}},
		{"junk", parsed{}},
		{"5.x", parsed{}},
		{"-5.10", parsed{}},
		{"99999999999999999999.1", parsed{}},
	} {
		var got parsed
		got.Major, got.Minor, got.OK = parseRelease(tc.release)
		got.From5_9, got.From5_11 = releaseAtLeast(tc.release, 5, 9), releaseAtLeast(tc.release, 5, 11)
		if got != tc.want {
			t.Errorf("%q: got %+v, want %+v", tc.release, got, tc.want)
		}
	}
}

// readWhole reads f from its offset through a fileVec in windows of four
// 1468-byte blocks, as a transfer does, up to the first window that comes
// back short, which a transfer takes for the end of the file; it fails
// the test on an error.
func readWhole(t *testing.T, f *os.File) []byte {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	v := newFileVec(rc, 4)
	var got []byte
	for {
		bufs := [][]byte{make([]byte, 1468), make([]byte, 1468), make([]byte, 1468), make([]byte, 1468)}
		n, err := readFull(v.read, slices.Clone(bufs)) // it moves its copy's starts on a short read
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		short := n < 4*1468
		for _, b := range bufs {
			k := min(n, len(b))
			got, n = append(got, b[:k]...), n-k
		}
		if short {
			return got
		}
	}
}

// TestFileVecReadsWhatIsNotCached: a block the page cache does not hold
// (preadv2 with RWF_NOWAIT answers EAGAIN) is read the ordinary way, not
// reported as an error or as the end of the file. The EAGAINs are counted
// on the way: a read that answers EAGAIN may start readahead of what
// follows (on 6.18 with ext4 it does), so a probe before the reads would
// leave nothing for them to fall back from.
func TestFileVecReadsWhatIsNotCached(t *testing.T) {
	if !nowaitReads {
		t.Skip("this kernel (before 5.11) reads every block the ordinary way")
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
	nowait := preadv2NoWait
	defer func() { preadv2NoWait = nowait }()
	eagain := 0
	preadv2NoWait = func(fd uintptr, iov []unix.Iovec) (int, syscall.Errno) {
		n, e := nowait(fd, iov)
		if e == unix.EAGAIN {
			eagain++
		}
		return n, e
	}
	if got := readWhole(t, f); !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, then the end of the file; want the file's %d", len(got), len(data))
	}
	if eagain == 0 {
		t.Skip("the page cache answered every read (a file system that keeps it, or fadvise ignored): nothing fell back")
	}
}

// TestFileVecConfirmsZero: on Linux 5.9 and 5.10 preadv2 with RWF_NOWAIT
// may answer 0, not EAGAIN, for data not cached (readv(2), BUGS). A 0
// taken for the end of the file ended a transfer short, and the server
// logged it ok. Here a stand-in for the raw call answers 0 for the third
// window, mid-file, and once at the end; the ordinary read behind it
// must still read the whole file.
func TestFileVecConfirmsZero(t *testing.T) {
	if !nowaitReads {
		t.Skip("this kernel (before 5.11) reads every block the ordinary way")
	}
	data := noise(64<<10, 8)
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	nowait := preadv2NoWait
	defer func() { preadv2NoWait = nowait }()
	calls, zeros := 0, 0
	preadv2NoWait = func(fd uintptr, iov []unix.Iovec) (int, syscall.Errno) {
		if calls++; calls == 3 {
			zeros++
			return 0, 0
		}
		n, e := nowait(fd, iov)
		if e == 0 && n == 0 {
			zeros++
		}
		return n, e
	}
	got := readWhole(t, f)
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, then the end of the file; want the file's %d", len(got), len(data))
	}
	if zeros < 2 {
		t.Fatalf("the raw read answered 0 %d times in %d calls; want the one mid-file and the end", zeros, calls)
	}
}

// TestStrayFromAnotherAddress: an ACK from another address on the
// client's port number (127.0.0.2 and 127.0.0.1 are both this host) is
// not the client's and moves nothing: the server sends the block again
// after Timeout. Both ways of reading the socket are checked: the raw
// recvfrom compares the sender's address itself (fromClient).
func TestStrayFromAnotherAddress(t *testing.T) {
	for _, raw := range []bool{true, false} {
		t.Run(fmt.Sprintf("raw calls %v", raw), func(t *testing.T) {
			rawCalls.Store(raw)
			defer rawCalls.Store(true)
			fx := start(t, Config{Timeout: 400 * time.Millisecond, Retries: 3})
			conn := dialRaw(t, fx.addr, request(1, "ipxe.efi", "octet"))
			defer conn.Close()
			p, tid := readPacket(t, conn)
			wantData(t, p, 1)
			port := conn.LocalAddr().(*net.UDPAddr).Port
			stray, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
			if err != nil {
				t.Skipf("cannot bind 127.0.0.2:%d: %v", port, err)
			}
			defer stray.Close()
			ack(t, stray, tid, 1)
			strayMovedNothing(t, conn, tid)
		})
	}
}

// TestUDPIOErrors: the raw calls' errors read as net.UDPConn's do ("read
// udp 127.0.0.1:1234: i/o timeout", not a "raw-read" inside a "read"), and
// still match what the sender and gso.send test for: the deadline, a
// closed socket, the errno.
func TestUDPIOErrors(t *testing.T) {
	srv, cli := socketPair(t)
	u := newUDPIO(srv, cli.LocalAddr().(*net.UDPAddr))
	if u == nil {
		t.Fatal("no raw calls for an IPv4 client of an IPv4 socket")
	}
	local := srv.LocalAddr().String()
	if err := srv.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := u.recv(make([]byte, 16))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("recv past the deadline: %v; want a timeout", err)
	}
	if want := "read udp " + local + ": i/o timeout"; err == nil || err.Error() != want {
		t.Errorf("recv past the deadline: %q, want %q", err, want)
	}
	err = u.send(make([]byte, 70_000)) // more than a UDP datagram holds
	if !errors.Is(err, unix.EMSGSIZE) {
		t.Errorf("send of 70,000 bytes: %v; want EMSGSIZE", err)
	}
	if want := "write udp " + local + "->" + cli.LocalAddr().String() + ": sendto: message too long"; err == nil || err.Error() != want {
		t.Errorf("send of 70,000 bytes: %q, want %q", err, want)
	}
	srv.Close()
	if _, err := u.recv(make([]byte, 16)); !errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "raw-") {
		t.Errorf("recv on a closed socket: %v; want net.ErrClosed, without raw-read", err)
	}
}

// TestSendSegmentsRefusesTooMany: one sendmsg carries at most
// gsoMaxSegments datagrams (its iovecs); given more, sendSegments says so
// and sends nothing, rather than sending the first ones as if they were
// all.
func TestSendSegmentsRefusesTooMany(t *testing.T) {
	srv, cli := socketPair(t)
	u := newUDPIO(srv, cli.LocalAddr().(*net.UDPAddr))
	if u == nil {
		t.Fatal("no raw calls for an IPv4 client of an IPv4 socket")
	}
	segs := make([][]byte, gsoMaxSegments+1)
	for i := range segs {
		segs[i] = make([]byte, 516)
	}
	if err := u.sendSegments(segs, udpSegment(516)); !errors.Is(err, errTooManySegments) {
		t.Fatalf("sendSegments of %d segments: %v; want errTooManySegments", len(segs), err)
	}
	expectSilence(t, cli, 50*time.Millisecond)
	if err := u.sendSegments(segs[:gsoMaxSegments], udpSegment(516)); err != nil {
		t.Skipf("segmented sends refused here: %v", err)
	}
	for i := range gsoMaxSegments {
		if p, _ := readPacket(t, cli); len(p) != 516 {
			t.Fatalf("datagram %d: %d bytes, want 516", i, len(p))
		}
	}
}
