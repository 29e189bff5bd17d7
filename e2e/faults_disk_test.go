package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A blocked disk is a data dir on its own ext4 file system in a loop-mounted
// image file, frozen with fsfreeze(8) (FIFREEZE): every write and fsync on
// it blocks until the thaw, while reads of cached pages go on, as with a
// disk that stopped completing writes. This machine has no device-mapper
// (no dmsetup suspend) and no fusermount, but loop devices and FIFREEZE
// work. A frozen file system outlives the process that froze it, so each
// freeze also starts a detached thaw that fires after the freeze's limit
// plus a grace even if the test binary is killed.

// loopDisk is an image file mounted at mnt.
type loopDisk struct {
	t   *testing.T
	img string
	mnt string

	mu     sync.Mutex
	frozen bool
	guard  *exec.Cmd // the detached safety thaw of the current freeze
}

// diskCmd runs a command of the root mount namespace, bounded.
func diskCmd(name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// loopDiskMissing says why this machine cannot give a data dir a
// freezable disk, or "" when it can: it builds, freezes and removes a
// small one in dir.
func loopDiskMissing(t *testing.T, dir string) string {
	for _, b := range []string{"mkfs.ext4", "mount", "umount", "fsfreeze"} {
		if _, err := exec.LookPath(b); err != nil {
			return "needs " + b + " in PATH"
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return "needs loop devices (/dev/loop-control)"
	}
	img, mnt := filepath.Join(dir, "probe-disk.img"), filepath.Join(dir, "probe-disk")
	d, err := mountLoopDisk(t, img, mnt, 16<<20)
	if err != nil {
		return err.Error()
	}
	defer d.remove()
	if err := diskCmd("fsfreeze", "-f", mnt); err != nil {
		return err.Error()
	}
	if err := diskCmd("fsfreeze", "-u", mnt); err != nil {
		return err.Error()
	}
	return ""
}

// newLoopDisk makes a 256 MiB sparse ext4 image and mounts it at mnt until
// the test ends; it fails the test when it cannot.
func newLoopDisk(t *testing.T, img, mnt string) *loopDisk {
	t.Helper()
	d, err := mountLoopDisk(t, img, mnt, 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the appliance starts, so it runs after the lab
	// stopped it.
	t.Cleanup(func() {
		if err := d.thaw(); err != nil {
			t.Errorf("thaw %s: %v", mnt, err)
		}
		d.remove()
	})
	return d
}

func mountLoopDisk(t *testing.T, img, mnt string, size int64) (*loopDisk, error) {
	f, err := os.Create(img)
	if err != nil {
		return nil, err
	}
	err = errors.Join(f.Truncate(size), f.Close())
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return nil, err
	}
	if err := diskCmd("mkfs.ext4", "-q", "-F", img); err != nil {
		return nil, err
	}
	// -o loop sets up a loop device that is freed with the mount.
	if err := diskCmd("mount", "-o", "loop", img, mnt); err != nil {
		return nil, err
	}
	return &loopDisk{t: t, img: img, mnt: mnt}, nil
}

// remove unmounts (lazily: a process may still hold a file) and deletes
// the image.
func (d *loopDisk) remove() {
	if err := diskCmd("umount", "-l", d.mnt); err != nil {
		d.t.Logf("loop disk: %v", err)
	}
	os.Remove(d.img)
}

// freeze blocks every write to the disk; a detached guard thaws it after
// limit plus a grace whatever happens to the test.
func (d *loopDisk) freeze(limit time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.frozen {
		return nil
	}
	guard := exec.Command("sh", "-c", `sleep "$0"; fsfreeze -u "$1"`, fmt.Sprint(int((limit + 10*time.Second).Seconds())), d.mnt)
	guard.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := guard.Start(); err != nil {
		return fmt.Errorf("freeze guard: %w", err)
	}
	if err := diskCmd("fsfreeze", "-f", d.mnt); err != nil {
		_ = guard.Process.Kill()
		_ = guard.Wait()
		return err
	}
	d.frozen, d.guard = true, guard
	// Runs before the lab stops the appliances, which may be blocked on
	// the disk.
	d.t.Cleanup(func() { _ = d.thaw() })
	return nil
}

// thaw lets writes through again; it does nothing when not frozen.
func (d *loopDisk) thaw() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.frozen {
		return nil
	}
	err := diskCmd("fsfreeze", "-u", d.mnt)
	if d.guard != nil {
		_ = syscall.Kill(-d.guard.Process.Pid, syscall.SIGKILL) // the guard's session: its sh and sleep
		_ = d.guard.Wait()
		d.guard = nil
	}
	if err != nil && !strings.Contains(err.Error(), "Invalid argument") { // thawed already
		return err
	}
	d.frozen = false
	return nil
}
