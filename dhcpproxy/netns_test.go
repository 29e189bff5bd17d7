package dhcpproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireRootNetns skips (or, with SITEBOOT_E2E=require, fails) when this
// test cannot create network namespaces.
func requireRootNetns(t *testing.T) {
	t.Helper()
	reason := ""
	if os.Geteuid() != 0 {
		reason = "needs root to create network namespaces"
	} else if _, err := exec.LookPath("ip"); err != nil {
		reason = "needs iproute2's ip command"
	}
	if reason == "" {
		return
	}
	if os.Getenv("SITEBOOT_E2E") == "require" {
		t.Fatalf("SITEBOOT_E2E=require but %s", reason)
	}
	t.Skip(reason)
}

// ipCmd runs one ip(8) command, bounded in time.
func ipCmd(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// netnsLab is a server namespace with two links, s1 and s2, each a veth
// to its own client namespace (c1, c2) whose end is eth0:
//
//	c1 eth0 10.231.1.2/24 -- s1 10.231.1.1/24 [srv] s2 10.231.2.1/24 -- c2 eth0 10.231.2.2/24
type netnsLab struct{ srv, c1, c2 string }

func newNetnsLab(t *testing.T) *netnsLab {
	t.Helper()
	requireRootNetns(t)
	p := fmt.Sprintf("sbdhcp-%d-", os.Getpid())
	lab := &netnsLab{srv: p + "srv", c1: p + "c1", c2: p + "c2"}
	for _, ns := range []string{lab.srv, lab.c1, lab.c2} {
		if err := ipCmd("netns", "add", ns); err != nil {
			if os.Getenv("SITEBOOT_E2E") == "require" {
				t.Fatal(err)
			}
			t.Skipf("cannot create a network namespace here: %v", err)
		}
		t.Cleanup(func() {
			if err := ipCmd("netns", "del", ns); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
	}
	steps := [][]string{
		{"-n", lab.srv, "link", "add", "s1", "type", "veth", "peer", "name", "eth0", "netns", lab.c1},
		{"-n", lab.srv, "link", "add", "s2", "type", "veth", "peer", "name", "eth0", "netns", lab.c2},
		{"-n", lab.srv, "addr", "add", "10.231.1.1/24", "dev", "s1"},
		{"-n", lab.srv, "addr", "add", "10.231.2.1/24", "dev", "s2"},
		{"-n", lab.c1, "addr", "add", "10.231.1.2/24", "dev", "eth0"},
		{"-n", lab.c2, "addr", "add", "10.231.2.2/24", "dev", "eth0"},
		{"-n", lab.srv, "link", "set", "lo", "up"},
		{"-n", lab.srv, "link", "set", "s1", "up"},
		{"-n", lab.srv, "link", "set", "s2", "up"},
		{"-n", lab.c1, "link", "set", "eth0", "up"},
		{"-n", lab.c2, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			t.Fatal(err)
		}
	}
	// A veth forwards nothing until both ends report carrier; a broadcast
	// sent before that is lost.
	for _, l := range [][2]string{{lab.srv, "s1"}, {lab.srv, "s2"}, {lab.c1, "eth0"}, {lab.c2, "eth0"}} {
		if err := waitCarrier(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	return lab
}

// waitCarrier waits up to 5 s for dev in namespace ns to have carrier.
func waitCarrier(ns, dev string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := exec.Command("ip", "-n", ns, "-o", "link", "show", "dev", dev).CombinedOutput()
		if err == nil && strings.Contains(string(out), "LOWER_UP") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s in %s has no carrier after 5 s: %s", dev, ns, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inNetns runs fn on an OS thread switched into the named namespace.
// Sockets fn creates belong to that namespace and may be used from any
// goroutine afterwards.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		ferr := fn()
		// If the thread cannot go back, leave it locked: it ends with the
		// goroutine instead of serving others from the wrong namespace.
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		} else {
			ferr = errors.Join(ferr, err)
		}
		errc <- ferr
	}()
	return <-errc
}

// clientSocket opens a UDP socket for a test client: bound to addr, to the
// device when dev is set, allowed to broadcast.
func clientSocket(dev, addr string) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1)
			if serr == nil && dev != "" {
				serr = unix.BindToDevice(int(fd), dev)
			}
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", addr)
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}
