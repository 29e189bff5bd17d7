package tftpd

import (
	"crypto/sha256"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFDExhaustionReported runs fdExhaustion in a child process whose
// RLIMIT_NOFILE it lowers, so that the rest of the tests keep their fds.
func TestFDExhaustionReported(t *testing.T) {
	if os.Getenv("TFTPD_FD_CHILD") == "1" {
		fdExhaustion(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFDExhaustionReported$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "TFTPD_FD_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestFDExhaustionReported") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// fdExhaustion: with no fd left, a request is dropped (the client will
// retry) and the log says the process is out of file descriptors, first
// when the file cannot be opened, then when its socket cannot; nothing
// claims the boot file changed. With fds back, the retry is served.
func fdExhaustion(t *testing.T) {
	fx := start(t, Config{Timeout: 200 * time.Millisecond, Retries: 2})
	client := dialRaw(t, fx.addr, nil)
	defer client.Close()
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	low := orig
	low.Cur = uint64(openFDs(t) + 16)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fillers []int
	release := func() {
		for _, fd := range fillers {
			syscall.Close(fd)
		}
		fillers = nil
	}
	defer release()
	// fillAllBut takes every free fd but n.
	fillAllBut := func(n int) {
		for {
			fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err == syscall.EMFILE {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			fillers = append(fillers, fd)
		}
		for range n {
			syscall.Close(fillers[len(fillers)-1])
			fillers = fillers[:len(fillers)-1]
		}
	}

	fillAllBut(0)
	send(t, client, fx.addr, request(1, "ipxe.efi", "octet"))
	expectSilence(t, client, 300*time.Millisecond)
	if l := fx.logs.wait("tftp request dropped", "reason=no_resources", `during="open file"`, "out of file descriptors", "RLIMIT_NOFILE"); len(l) != 1 {
		t.Errorf("no log line for the file that could not be opened:\n%s", strings.Join(fx.logs.lines(""), "\n"))
	}

	fillAllBut(1) // room for the file, not for the socket
	send(t, client, fx.addr, request(1, "undionly.kpxe", "octet"))
	expectSilence(t, client, 300*time.Millisecond)
	if l := fx.logs.wait("tftp request dropped", "reason=no_resources", `during="open socket"`, "out of file descriptors"); len(l) != 1 {
		t.Errorf("no log line for the socket that could not be opened:\n%s", strings.Join(fx.logs.lines(""), "\n"))
	}
	if l := fx.logs.lines("rehash"); len(l) != 0 {
		t.Errorf("fd exhaustion is logged as a changed boot file: %v", l)
	}
	waitMetric(t, fx, `siteboot_tftp_requests_dropped_total{reason="no_resources"}`, 2)

	release()
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	send(t, client, fx.addr, request(1, "ipxe.efi", "octet")) // the client's retry
	if r := rawDrive(t, client); r.SHA256 != sha256.Sum256(testFiles["ipxe.efi"]) {
		t.Fatalf("the retry with fds back: %+v", r)
	}
}
