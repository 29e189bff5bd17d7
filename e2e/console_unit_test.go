package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeGetty stands in for agetty and login on a real pty: it asks again on
// an empty name, turns echo off for the password, says "Login incorrect"
// (after a pause, as PAM does) unless it is root/secret, and then runs an
// interactive sh with a root prompt.
const fakeGetty = `
while :; do
	printf 'e2e login: '
	read -r user
	[ -n "$user" ] && break
done
stty -echo
printf 'Password: '
read -r pw
stty echo
printf '\n'
if [ "$user" = root ] && [ "$pw" = secret ]; then
	printf 'Linux e2e\n\nmotd # text\n'
	PS1='root@e2e:~# ' exec sh -i
fi
sleep 0.3
printf '\nLogin incorrect\n'
sleep 30
`

// openPTY returns a pty's master, pollable so that Close ends a blocked
// Read, and the path of its slave.
func openPTY(t *testing.T) (*os.File, string) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	raw, err := master.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	// Not master.Fd(): that would make the file blocking again.
	err = raw.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr == nil {
			n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	})
	if err = errors.Join(err, ierr); err != nil {
		master.Close()
		t.Fatalf("unlock pty: %v", err)
	}
	return master, "/dev/pts/" + strconv.Itoa(n)
}

// startOnPTY runs script under sh with a new pty as its controlling
// terminal and returns a console on the master. The cleanup closes the
// console and kills the script.
func startOnPTY(t *testing.T, script string) *console {
	t.Helper()
	master, slavePath := openPTY(t)
	slave, err := os.OpenFile(slavePath, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Start()
	slave.Close()
	if err != nil {
		master.Close()
		t.Fatal(err)
	}
	// Written by the console's reader, read here only once Close has
	// stopped it.
	var transcript strings.Builder
	c := newConsole(master, &transcript)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		c.Close()
		if t.Failed() {
			t.Logf("transcript:\n%s", transcript.String())
		}
	})
	return c
}

func TestConsoleLoginAndRun(t *testing.T) {
	c := startOnPTY(t, fakeGetty)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.login(ctx, "root", "secret"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd    string
		out    string
		status int
	}{
		{cmd: "echo hello; echo world", out: "hello\nworld\n"},
		{cmd: "false", status: 1},
		{cmd: "(exit 7)", status: 7},
		{cmd: "echo to stderr >&2; (exit 127)", out: "to stderr\n", status: 127},
		// stdin is /dev/null: cat ends at once instead of eating the marker line.
		{cmd: "cat; echo after cat", out: "after cat\n"},
		{cmd: "printf 'no newline'", out: "no newline"},
		// A marker in a command's output is not taken for the real one.
		{cmd: "printf '__E99=0__\\n'", out: "__E99=0__\n"},
	} {
		out, status, err := c.run(ctx, tc.cmd)
		if err != nil {
			t.Fatal(err)
		}
		if out != tc.out || status != tc.status {
			t.Errorf("run(%q) = %q, %d; want %q, %d", tc.cmd, out, status, tc.out, tc.status)
		}
	}
}

// A command that outlives its context is interrupted, and the console
// runs the next command normally.
func TestConsoleRunTimeout(t *testing.T) {
	c := startOnPTY(t, fakeGetty)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.login(ctx, "root", "secret"); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	start := time.Now()
	_, _, err := c.run(short, "echo started; sleep 20")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("run of sleep 20 with a 500 ms context: %v; want a deadline error", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("run of sleep 20 with a 500 ms context returned after %s", took)
	}
	if !strings.Contains(err.Error(), "started") {
		t.Errorf("the error does not show the console's last output: %v", err)
	}
	out, status, err := c.run(ctx, "echo next")
	if err != nil || out != "next\n" || status != 0 {
		t.Errorf("run after the interrupt = %q, %d, %v; want \"next\\n\", 0", out, status, err)
	}
}

func TestConsoleWrongPassword(t *testing.T) {
	c := startOnPTY(t, fakeGetty)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.login(ctx, "root", "wrong")
	if err == nil || !strings.Contains(err.Error(), "Login incorrect") {
		t.Fatalf("login with a wrong password: %v; want Login incorrect", err)
	}
}

// A guest that never prompts fails login when its context ends.
func TestConsoleSilentGuest(t *testing.T) {
	c := startOnPTY(t, "stty -echo; exec sleep 60")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	err := c.login(ctx, "root", "secret")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("login on a silent console: %v; want a deadline error", err)
	}
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("login on a silent console returned after %s; want about 3 s", took)
	}
}

// A guest that goes away ends a wait at once, with what it printed last.
func TestConsoleClosed(t *testing.T) {
	c := startOnPTY(t, "printf 'shutting down\\n'; sleep 0.2")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := c.login(ctx, "root", "secret")
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("login on a console that closed: %v; want a closed-console error showing its output", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("login on a console that closed returned after %s", took)
	}
}
