package netlab

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestHostsPingOverBridge(t *testing.T) {
	Require(t, Needs{Binaries: []string{"ping"}})
	l := New(t, Config{})
	a, b := l.AddHost("a"), l.AddHost("b")
	for _, pair := range [][2]*Host{{a, b}, {b, a}} {
		out, err := pair[0].Run(l.Context(), "ping", "-c", "2", "-i", "0.2", "-W", "2", pair[1].Addr().String())
		if err != nil {
			t.Fatalf("%s ping %s: %v\n%s", pair[0].Name(), pair[1].Addr(), err, out)
		}
		if !strings.Contains(string(out), "2 received") {
			t.Errorf("%s ping %s: want 2 received, got:\n%s", pair[0].Name(), pair[1].Addr(), out)
		}
	}
}

// TestBroadcastReachesOtherHost proves the 255.255.255.255/32 route and that
// sockets opened with ListenPacket live in the host's namespace.
func TestBroadcastReachesOtherHost(t *testing.T) {
	Require(t)
	l := New(t, Config{})
	a, b := l.AddHost("a"), l.AddHost("b")
	ctx := l.Context()
	recv, err := b.ListenPacket(ctx, nil, "udp4", "0.0.0.0:6868")
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	send, err := a.ListenPacket(ctx, broadcastConfig(), "udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	if _, err := send.WriteTo([]byte("hello"), &net.UDPAddr{IP: net.IPv4bcast, Port: 6868}); err != nil {
		t.Fatalf("broadcast: %v", err)
	}
	_ = recv.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, from, err := recv.ReadFrom(buf)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	got := []string{string(buf[:n]), from.(*net.UDPAddr).IP.String()}
	if diff := cmp.Diff([]string{"hello", a.Addr().String()}, got); diff != "" {
		t.Errorf("broadcast mismatch (-want +got):\n%s", diff)
	}
}

func broadcastConfig() *net.ListenConfig {
	return &net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1)
		})
		return errors.Join(err, serr)
	}}
}

func TestLoopbackIsolatedFromRoot(t *testing.T) {
	Require(t)
	l := New(t, Config{})
	a := l.AddHost("a")
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = a.Do(func() error {
		c, err := net.DialTimeout("tcp4", ln.Addr().String(), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err == nil {
		t.Errorf("dial %s from host namespace reached the root namespace's listener", ln.Addr())
	}
}

func TestCleanupStale(t *testing.T) {
	Require(t, Needs{Binaries: []string{"sleep"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old, young := addBareNamespace(ctx, t), ""
	sleeper := exec.Command("ip", "netns", "exec", old, "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	time.Sleep(20 * time.Millisecond)
	cutoff := time.Now()
	time.Sleep(20 * time.Millisecond)
	young = addBareNamespace(ctx, t)
	held := New(t, Config{})
	held.AddHost("a")

	removed, err := cleanupStale(cutoff)
	if err != nil {
		t.Fatalf("cleanupStale: %v", err)
	}
	if diff := cmp.Diff([]string{old}, removed); diff != "" {
		t.Errorf("removed mismatch (-want +got):\n%s", diff)
	}
	for _, ns := range []string{young, held.SwitchNS(), held.ID() + "-a"} {
		if _, err := os.Stat(filepath.Join(netnsDir, ns)); err != nil {
			t.Errorf("namespace %s was removed: %v", ns, err)
		}
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("process in stale namespace %s was not killed", old)
		_ = sleeper.Process.Kill()
		<-exited
	}
}

// addBareNamespace creates an "sbt-" namespace with no lab lock, as a crashed
// run leaves behind.
func addBareNamespace(ctx context.Context, t *testing.T) string {
	t.Helper()
	ns := Prefix + randomHex(3) + "-sw"
	if err := runIP(ctx, "", "netns", "add", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(netnsDir, ns)); err == nil {
			_ = deleteNamespace(ns)
		}
	})
	return ns
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
