package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// listen opens a real unixgram socket, as the service manager does, and
// returns its name and a function reading the next datagram.
func listen(t *testing.T, name string) func() string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func() string {
		t.Helper()
		buf := make([]byte, 2*MaxMessage)
		if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("reading the notify socket: %v", err)
		}
		return string(buf[:n])
	}
}

func TestNotifyOneDatagram(t *testing.T) {
	for name, socket := range map[string]string{
		"path":     filepath.Join(t.TempDir(), "notify.sock"),
		"abstract": fmt.Sprintf("@siteboot-sdnotify-test-%d", os.Getpid()),
	} {
		t.Run(name, func(t *testing.T) {
			read := listen(t, socket)
			n, err := New(socket)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Notify(Ready, Status("ready:\nlease active")); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff("READY=1\nSTATUS=ready: lease active", read()); diff != "" {
				t.Errorf("first datagram (-want +got):\n%s", diff)
			}
			if err := n.Notify(Watchdog); err != nil {
				t.Fatal(err)
			}
			if got := read(); got != "WATCHDOG=1" {
				t.Errorf("second datagram = %q; want WATCHDOG=1", got)
			}
		})
	}
}

func TestNotifyWithoutManagerDoesNothing(t *testing.T) {
	n, err := New("")
	if err != nil || n != nil {
		t.Fatalf(`New("") = %v, %v; want nil, nil`, n, err)
	}
	if err := n.Notify(Ready); err != nil {
		t.Errorf("nil Notifier: Notify = %v; want nil", err)
	}
	if n.Socket() != "" {
		t.Errorf("nil Notifier: Socket = %q", n.Socket())
	}
}

func TestNotifyToGoneSocketFails(t *testing.T) {
	n, err := New(filepath.Join(t.TempDir(), "gone.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Notify(Ready); err == nil || !strings.Contains(err.Error(), "sdnotify:") {
		t.Errorf("Notify to a socket nobody listens on = %v; want an sdnotify error", err)
	}
}

func TestNewRefusesBadSocket(t *testing.T) {
	for name, tc := range map[string]struct{ socket, want string }{
		"relative": {"run/notify", "neither an absolute path"},
		"vsock":    {"vsock:2:1234", "vsock is not supported"},
		"too long": {"/" + strings.Repeat("x", 107), "at most 107 fit"},
	} {
		t.Run(name, func(t *testing.T) {
			n, err := New(tc.socket)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "NOTIFY_SOCKET") {
				t.Fatalf("New(%q) = %v, %v; want an error naming NOTIFY_SOCKET with %q", tc.socket, n, err, tc.want)
			}
		})
	}
}

func TestNotifyRefusesBadMessage(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "notify.sock")
	read := listen(t, socket)
	n, err := New(socket)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		assignments []string
		want        string
	}{
		"no equals":   {[]string{"READY"}, "not one VAR=value"},
		"empty name":  {[]string{"=1"}, "not one VAR=value"},
		"two in one":  {[]string{"READY=1\nSTOPPING=1"}, "not one VAR=value"},
		"nul":         {[]string{"STATUS=a\x00b"}, "not one VAR=value"},
		"over a pipe": {[]string{"STATUS=" + strings.Repeat("x", MaxMessage)}, "at most 4096"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := n.Notify(tc.assignments...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Notify(%q) = %v; want an error with %q", tc.assignments, err, tc.want)
			}
		})
	}
	// Nothing refused reached the socket: the next datagram is this one.
	if err := n.Notify(Stopping); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != Stopping {
		t.Errorf("datagram after the refusals = %q; want only %q", got, Stopping)
	}
}

func TestWatchdogInterval(t *testing.T) {
	for name, tc := range map[string]struct {
		usec, pid string
		want      time.Duration
		err       string
	}{
		"unset":           {"", "", 0, ""},
		"30s, any pid":    {"30000000", "", 30 * time.Second, ""},
		"30s, this pid":   {"30000000", "4242", 30 * time.Second, ""},
		"another process": {"30000000", "4243", 0, ""},
		"zero":            {"0", "", 0, "WATCHDOG_USEC"},
		"not a number":    {"30s", "", 0, "WATCHDOG_USEC"},
		"negative":        {"-1", "", 0, "WATCHDOG_USEC"},
		"bad pid":         {"30000000", "self", 0, "WATCHDOG_PID"},
		"huge":            {"9223372036854775807", "", 0, "out of range"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := WatchdogInterval(tc.usec, tc.pid, 4242)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("WatchdogInterval(%q, %q) = %v, %v; want an error naming %s", tc.usec, tc.pid, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("WatchdogInterval(%q, %q) = %v, %v; want %v", tc.usec, tc.pid, got, err, tc.want)
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "notify.sock")
	read := listen(t, socket)
	env := map[string]string{"NOTIFY_SOCKET": socket, "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "77"}
	n, wd, err := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, 77)
	if err != nil {
		t.Fatal(err)
	}
	if wd != 2*time.Second || n.Socket() != socket {
		t.Fatalf("FromEnv = %q, %v; want %q, 2s", n.Socket(), wd, socket)
	}
	if err := n.Notify(ExtendTimeout(1500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "EXTEND_TIMEOUT_USEC=1500000" {
		t.Errorf("datagram = %q; want EXTEND_TIMEOUT_USEC=1500000", got)
	}
	env["WATCHDOG_USEC"] = "soon"
	if _, _, err := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, 77); err == nil {
		t.Error("FromEnv with WATCHDOG_USEC=soon: no error")
	}
}
