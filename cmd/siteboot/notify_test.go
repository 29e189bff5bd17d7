package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/siteboot/siteboot/appliance"
	"github.com/siteboot/siteboot/internal/sdnotify"
)

// notifyInbox is a unixgram socket standing in for systemd's notify socket.
type notifyInbox struct {
	path string
	msgs chan string
}

func listenNotify(t *testing.T) *notifyInbox {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	in := &notifyInbox{path: path, msgs: make(chan string, 1024)}
	go func() {
		buf := make([]byte, 8192)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			in.msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return in
}

// next is the next datagram, failing the test after wait.
func (in *notifyInbox) next(t *testing.T, wait time.Duration) string {
	t.Helper()
	select {
	case m := <-in.msgs:
		return m
	case <-time.After(wait):
		t.Fatalf("no notification within %v", wait)
		return ""
	}
}

// mark sends a datagram of its own to the inbox and reads up to it: what
// was in the socket before it is gone.
func (in *notifyInbox) mark(t *testing.T) {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: in.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const marker = "TEST-MARKER"
	if _, err := c.Write([]byte(marker)); err != nil {
		t.Fatal(err)
	}
	in.until(t, marker, 5*time.Second)
}

// until reads datagrams until one equals want, failing after wait; it
// returns the ones before it.
func (in *notifyInbox) until(t *testing.T, want string, wait time.Duration) []string {
	t.Helper()
	var before []string
	deadline := time.After(wait)
	for {
		select {
		case m := <-in.msgs:
			if m == want {
				return before
			}
			before = append(before, m)
		case <-deadline:
			t.Fatalf("no %q within %v; got %q", want, wait, before)
		}
	}
}

func (in *notifyInbox) notifier(t *testing.T) *sdnotify.Notifier {
	t.Helper()
	n, err := sdnotify.New(in.path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Under a service manager serve says READY=1 only once the API answers
// ready, pings WATCHDOG=1 every half interval, and says STOPPING=1 on stop.
func TestServeNotifiesReadyWatchdogStopping(t *testing.T) {
	in := listenNotify(t)
	cfg := leaseTestConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serveManaged(ctx, cfg, quietLog(), manager{notify: in.notifier(t), watchdog: 200 * time.Millisecond})
	}()
	defer func() { cancel(); <-done }()

	first := in.next(t, 15*time.Second)
	if want := "READY=1\nSTATUS=ready: site site-test, node appliance-test, lease standalone"; first != want {
		t.Fatalf("first notification = %q; want %q", first, want)
	}
	if st, err := getStatus(cfg.Admin.Socket); err != nil || !st.GetReady() {
		t.Fatalf("right after READY=1: status %v, %v; want ready", st, err)
	}
	start := time.Now()
	for i := range 3 {
		if got := in.next(t, 2*time.Second); got != sdnotify.Watchdog {
			t.Fatalf("notification %d after READY=1 = %q; want %s", i+2, got, sdnotify.Watchdog)
		}
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 1500*time.Millisecond {
		t.Errorf("3 pings took %v; want about 3 × 100ms (half the 200ms watchdog)", took)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	done <- nil
	for _, m := range in.until(t, sdnotify.Stopping, 5*time.Second) {
		if m != sdnotify.Watchdog {
			t.Errorf("before STOPPING=1: %q; want only pings", m)
		}
	}
}

// A cluster member whose peers never answer is not ready: serve never says
// READY=1 nor pings, but tells the manager why and to keep waiting.
func TestServeStartingNeverReady(t *testing.T) {
	in := listenNotify(t)
	cfg := leaseTestConfig(t)
	cfg.Lease.Mode, cfg.Lease.TTL = "cluster", appliance.Duration(2*time.Second)
	cfg.Lease.Raft.Bind = freePort(t)
	cfg.Lease.Raft.Join = []string{freePort(t), freePort(t)}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serveManaged(ctx, cfg, quietLog(),
			manager{notify: in.notifier(t), watchdog: 100 * time.Millisecond, starting: 100 * time.Millisecond})
	}()
	for range 5 {
		got := in.next(t, 10*time.Second)
		if !strings.HasPrefix(got, "STATUS=starting: ") || !strings.HasSuffix(got, "\nEXTEND_TIMEOUT_USEC=30000000") {
			t.Fatalf("while not ready: %q; want STATUS=starting: … and EXTEND_TIMEOUT_USEC", got)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	for _, m := range in.until(t, sdnotify.Stopping, 5*time.Second) {
		if !strings.HasPrefix(m, "STATUS=starting: ") {
			t.Errorf("a never-ready serve sent %q", m)
		}
	}
}

// wedgeable is an appliance whose status read can be made to fail or to
// hang, as a deadlocked state would: nothing real wedges on demand.
type wedgeable struct {
	ready   chan struct{}
	failing atomic.Bool
	wedged  atomic.Bool
	gate    chan struct{}
	saw     atomic.Int64 // status reads that found it failing or wedged
}

func (w *wedgeable) Ready() <-chan struct{} { return w.ready }

func (w *wedgeable) Status(ctx context.Context) (appliance.Status, error) {
	if w.wedged.Load() {
		w.saw.Add(1)
		select {
		case <-w.gate:
		case <-ctx.Done():
			return appliance.Status{}, ctx.Err()
		}
	}
	if w.failing.Load() {
		w.saw.Add(1)
		return appliance.Status{NotReady: "test: failing"}, nil
	}
	return appliance.Status{Ready: true, SiteID: "s", NodeID: "n", LeaseMode: "standalone"}, nil
}

// A failing or wedged appliance stops pinging (so systemd's WatchdogSec
// restarts it), and pings again once its check passes.
func TestWatchdogPingsOnlyWhileCheckAnswers(t *testing.T) {
	in := listenNotify(t)
	w := &wedgeable{ready: make(chan struct{}), gate: make(chan struct{})}
	close(w.ready)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		tellManager(ctx, w, manager{notify: in.notifier(t), watchdog: 100 * time.Millisecond}, quietLog())
		close(done)
	}()
	defer func() { cancel(); <-done }()
	if got := in.next(t, 5*time.Second); !strings.HasPrefix(got, sdnotify.Ready+"\n") {
		t.Fatalf("first = %q; want READY=1", got)
	}
	pings := func(what string) {
		t.Helper()
		for range 2 {
			if got := in.next(t, 2*time.Second); got != sdnotify.Watchdog {
				t.Fatalf("%s: got %q; want %s", what, got, sdnotify.Watchdog)
			}
		}
	}
	silent := func(what string) {
		t.Helper()
		// Once a status read has seen the change, every ping the loop
		// sent before it is in the socket (the loop reads, then pings);
		// a marker sent now comes after them all.
		deadline := time.Now().Add(5 * time.Second)
		for n := w.saw.Load(); w.saw.Load() == n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no status read in 5 s", what)
			}
		}
		in.mark(t)
		select {
		case m := <-in.msgs:
			t.Fatalf("%s, still sent %q", what, m)
		case <-time.After(500 * time.Millisecond): // 10 half intervals
		}
	}
	pings("passing")
	w.failing.Store(true)
	silent("check failing")
	w.failing.Store(false)
	pings("passing again")
	w.wedged.Store(true)
	silent("check hanging")
	close(w.gate)
	pings("after the check answers again")
}

// The real binary reads NOTIFY_SOCKET and WATCHDOG_USEC from its
// environment as systemd sets them, and exits 0 after STOPPING=1 on SIGTERM.
func TestServeProcessNotifiesFromEnvironment(t *testing.T) {
	in := listenNotify(t)
	cmd := startServeEnv(t, []string{"NOTIFY_SOCKET=" + in.path, "WATCHDOG_USEC=400000"},
		"--data-dir", t.TempDir(), "--http-listen", "127.0.0.1:0")
	if got := in.next(t, 15*time.Second); !strings.HasPrefix(got, "READY=1\nSTATUS=ready: ") {
		t.Fatalf("first notification = %q; want READY=1", got)
	}
	if got := in.next(t, 2*time.Second); got != sdnotify.Watchdog {
		t.Fatalf("second notification = %q; want %s", got, sdnotify.Watchdog)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	in.until(t, sdnotify.Stopping, 10*time.Second)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v; want exit 0", err)
	}
}

// A NOTIFY_SOCKET serve cannot use is refused by name before anything starts.
func TestServeRefusesBadNotifySocket(t *testing.T) {
	env := map[string]string{"NOTIFY_SOCKET": "run/notify", "SITEBOOT_DHCP_ENABLED": "false", "SITEBOOT_TFTP_LISTEN": ""}
	dir := t.TempDir()
	var out bytes.Buffer
	root := newRootCmd(&out, &out, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	root.SetArgs([]string{"serve", "--data-dir", dir, "--http-listen", "127.0.0.1:0", "--node-id", "n"})
	err := root.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), `NOTIFY_SOCKET "run/notify"`) {
		t.Fatalf("serve with NOTIFY_SOCKET=run/notify: %v; want a refusal naming it", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused serve left state behind: stat raft: %v", err)
	}
}
