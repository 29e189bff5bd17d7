package netlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Process is a command running in a lab namespace, its output going to a
// log file. The lab stops it at the end of the test.
type Process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// Run runs a command inside the host's namespace and returns its combined
// output. It is bounded by ctx and the lab's command timeout.
func (h *Host) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return h.lab.run(ctx, h.ns, name, args...)
}

func (l *Lab) run(ctx context.Context, ns, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	l.logf("run in %s: %s %s: %v\n%s", ns, name, strings.Join(args, " "), err, out)
	if err != nil {
		return out, fmt.Errorf("%s in %s: %w", name, ns, err)
	}
	return out, nil
}

// Start starts a long-running command inside the host's namespace, its
// stdout and stderr in Dir()/<label>.log. The test's cleanup stops it.
func (h *Host) Start(label, name string, args ...string) *Process {
	h.lab.t.Helper()
	return h.lab.start(h.ns, label, name, args...)
}

func (l *Lab) start(ns, label, name string, args ...string) *Process {
	l.t.Helper()
	p, err := l.startProcess(ns, label, name, args...)
	if err != nil {
		l.t.Fatalf("netlab: %v", err)
	}
	l.stopAtCleanup(p)
	return p
}

// stopAtCleanup stops p when the test ends and, if it failed, logs the
// tail of p's output.
func (l *Lab) stopAtCleanup(p *Process) {
	l.t.Cleanup(func() {
		p.Stop()
		if l.t.Failed() {
			l.t.Logf("netlab: %s log (last 4 KiB):\n%s", p.name, tail(p.Output(), 4096))
		}
	})
}

// Command returns name with args made to run inside the host's namespace,
// in a pid namespace of its own that dies with the test binary, for a
// caller that starts and waits on the process itself (a harness owning
// its daemon). The lab's teardown kills it if the caller did not.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("unshare", supervised(h.ns, name, args)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (l *Lab) startProcess(ns, label, name string, args ...string) (*Process, error) {
	logPath := filepath.Join(l.dir, label+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", label, err)
	}
	defer f.Close()
	cmd := exec.Command("unshare", supervised(ns, name, args)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = l.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", label, name, err)
	}
	l.logf("started %s in %s: pid %d: %s %s", label, ns, cmd.Process.Pid, name, strings.Join(args, " "))
	p := &Process{name: label, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// supervised wraps a command so that it cannot outlive the test binary:
// the binary's child is unshare(1), whose parent-death signal is SIGKILL;
// unshare's child is a shell that is pid 1 of a new pid namespace and dies
// with unshare (--kill-child); when pid 1 dies the kernel kills the whole
// pid namespace, including daemons such as dnsmasq that clear their own
// parent-death signal when they change credentials.
func supervised(ns, name string, args []string) []string {
	return append([]string{"--pid", "--fork", "--kill-child=SIGKILL", "--",
		"sh", "-c", `ip netns exec "$0" "$@" & wait $!`, ns, name}, args...)
}

// Pid is the id of the supervising unshare(1) process.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath is the file holding the process's stdout and stderr.
func (p *Process) LogPath() string { return p.log }

// Output returns what the process has written so far.
func (p *Process) Output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error; valid once Done is closed.
func (p *Process) Err() error { return p.err }

// Stop sends SIGTERM to the process group, then SIGKILL after 5 s, and
// waits for the exit. It is safe to call more than once.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// WaitOutput waits until the process's output contains substr and returns
// the first line holding it. It fails when ctx ends or the process exits
// first.
func (p *Process) WaitOutput(ctx context.Context, substr string) (string, error) {
	return waitFor(ctx, p.done, func() (string, bool) { return findLine(p.Output(), substr) },
		fmt.Sprintf("%s output to contain %q", p.name, substr))
}

// WaitFile waits until file path contains substr and returns the first line
// holding it.
func WaitFile(ctx context.Context, path, substr string) (string, error) {
	return waitFor(ctx, nil, func() (string, bool) {
		b, _ := os.ReadFile(path)
		return findLine(string(b), substr)
	}, fmt.Sprintf("%s to contain %q", path, substr))
}

// waitFor polls check every 50 ms until it succeeds, ctx ends, or exited
// is closed.
func waitFor(ctx context.Context, exited <-chan struct{}, check func() (string, bool), what string) (string, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if s, ok := check(); ok {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-exited:
			if s, ok := check(); ok {
				return s, nil
			}
			return "", fmt.Errorf("waiting for %s: %w", what, errExited)
		case <-tick.C:
		}
	}
}

var errExited = errors.New("process exited")

func findLine(text, substr string) (string, bool) {
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, substr) {
			return line, true
		}
	}
	return "", false
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	b := []byte(s[len(s)-n:])
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return string(b)
}
