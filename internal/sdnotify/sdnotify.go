// Package sdnotify speaks the service manager's notification protocol
// (sd_notify(3), systemd.service(5) Type=notify): newline-separated
// VAR=value assignments sent as one datagram to the AF_UNIX socket the
// manager names in $NOTIFY_SOCKET, and the watchdog interval it asks for in
// $WATCHDOG_USEC and $WATCHDOG_PID.
//
// It needs no systemd library and reads no environment itself: the caller
// hands FromEnv its lookup function. Outside a service manager (no
// $NOTIFY_SOCKET) the Notifier is nil and Notify does nothing.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// The assignments this package's callers send.
const (
	// Ready tells the manager start-up is finished.
	Ready = "READY=1"
	// Stopping tells the manager the service is shutting down.
	Stopping = "STOPPING=1"
	// Watchdog is the keep-alive ping; a service whose pings stop for
	// WatchdogSec is killed and, with Restart=, started again.
	Watchdog = "WATCHDOG=1"
)

// MaxMessage is the largest datagram sent: the manager reads at most a
// pipe buffer's worth and drops longer messages.
const MaxMessage = 4096

// maxSocketPath is the room in sockaddr_un.sun_path for a name.
const maxSocketPath = 107

// Notifier sends notifications to one service manager socket.
type Notifier struct {
	addr *net.UnixAddr
}

// New returns a Notifier for socket, the value of $NOTIFY_SOCKET: an
// absolute path, or an abstract socket name starting with '@'. An empty
// socket means no manager is listening: New returns a nil Notifier, whose
// Notify does nothing.
func New(socket string) (*Notifier, error) {
	switch {
	case socket == "":
		return nil, nil
	case len(socket) > maxSocketPath:
		return nil, fmt.Errorf("sdnotify: NOTIFY_SOCKET is %d bytes long; at most %d fit a unix socket address", len(socket), maxSocketPath)
	case socket[0] != '/' && socket[0] != '@':
		return nil, fmt.Errorf("sdnotify: NOTIFY_SOCKET %q is neither an absolute path nor an abstract '@' name (vsock is not supported)", socket)
	}
	// Go's unix sockaddr turns a leading '@' into the abstract namespace's NUL.
	return &Notifier{addr: &net.UnixAddr{Name: socket, Net: "unixgram"}}, nil
}

// Socket is the socket n sends to ("" for a nil Notifier).
func (n *Notifier) Socket() string {
	if n == nil {
		return ""
	}
	return n.addr.Name
}

// Notify sends the assignments (each "VAR=value") in one datagram. On a nil
// Notifier it does nothing.
func (n *Notifier) Notify(assignments ...string) error {
	if n == nil {
		return nil
	}
	msg := strings.Join(assignments, "\n")
	if err := checkMessage(msg, assignments); err != nil {
		return err
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(msg)); err != nil {
		return fmt.Errorf("sdnotify: send to %s: %w", n.addr.Name, err)
	}
	return nil
}

func checkMessage(msg string, assignments []string) error {
	if len(msg) > MaxMessage {
		return fmt.Errorf("sdnotify: message of %d bytes; the manager reads at most %d", len(msg), MaxMessage)
	}
	for _, a := range assignments {
		if k, _, ok := strings.Cut(a, "="); !ok || k == "" || strings.ContainsAny(a, "\n\x00") {
			return fmt.Errorf("sdnotify: %q is not one VAR=value assignment", a)
		}
	}
	return nil
}

// Status is the STATUS= assignment carrying text, which systemctl status
// shows; line breaks become spaces so it stays one assignment.
func Status(text string) string {
	return "STATUS=" + strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == 0 {
			return ' '
		}
		return r
	}, text)
}

// ExtendTimeout is the EXTEND_TIMEOUT_USEC= assignment: the manager's
// start-up (or stop) timeout is pushed to d from now, once.
func ExtendTimeout(d time.Duration) string {
	return "EXTEND_TIMEOUT_USEC=" + strconv.FormatInt(d.Microseconds(), 10)
}

// WatchdogInterval is the watchdog timeout the manager asks process pid to
// ping within: WATCHDOG_USEC, unless WATCHDOG_PID names another process.
// It is 0 when no watchdog is set, or it is meant for another process.
// Send Watchdog at half of it or more often.
func WatchdogInterval(usec, watchdogPID string, pid int) (time.Duration, error) {
	if usec == "" {
		return 0, nil
	}
	if watchdogPID != "" {
		p, err := strconv.Atoi(watchdogPID)
		if err != nil || p <= 0 {
			return 0, fmt.Errorf("sdnotify: WATCHDOG_PID %q is not a process id", watchdogPID)
		}
		if p != pid {
			return 0, nil
		}
	}
	us, err := strconv.ParseUint(usec, 10, 63)
	if err != nil || us == 0 {
		return 0, fmt.Errorf("sdnotify: WATCHDOG_USEC %q is not a positive number of microseconds", usec)
	}
	if us > uint64(time.Duration(1<<63-1).Microseconds()) {
		return 0, errors.New("sdnotify: WATCHDOG_USEC is out of range")
	}
	return time.Duration(us) * time.Microsecond, nil
}

// FromEnv reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID through
// getenv for process pid: the Notifier (nil without a manager) and the
// watchdog interval (0 without one).
func FromEnv(getenv func(string) (string, bool), pid int) (*Notifier, time.Duration, error) {
	get := func(k string) string { v, _ := getenv(k); return v }
	n, err := New(get("NOTIFY_SOCKET"))
	if err != nil {
		return nil, 0, err
	}
	wd, err := WatchdogInterval(get("WATCHDOG_USEC"), get("WATCHDOG_PID"), pid)
	if err != nil {
		return nil, 0, err
	}
	return n, wd, nil
}
