package netlab

import (
	"fmt"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on an OS thread that has entered the host's network namespace.
// Sockets fn creates stay in that namespace after fn returns, so a test can
// serve or send on the lab's LAN from its own process. Goroutines fn starts
// run elsewhere: create the sockets inside fn, use them anywhere.
func (h *Host) Do(fn func() error) error {
	return inNamespace(filepath.Join(netnsDir, h.ns), fn)
}

func inNamespace(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is locked while it is in the other namespace; if it
		// cannot get back, it stays locked and exits with this goroutine.
		runtime.LockOSThread()
		errc <- runIn(path, fn)
	}()
	return <-errc
}

func runIn(path string, fn func() error) error {
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open own namespace: %w", err)
	}
	defer unix.Close(orig)
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open namespace %s: %w", path, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter namespace %s: %w", path, err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("leave namespace %s: %w (after %v)", path, err, ferr)
	}
	runtime.UnlockOSThread()
	return ferr
}
