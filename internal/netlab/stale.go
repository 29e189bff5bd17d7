package netlab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// Prefix starts the name of every namespace a lab creates.
	Prefix = "sbt-"
	// LockDir holds one lock file per live lab (also used by bench/ scripts).
	LockDir = "/run/sbt-netlab"
	// netnsDir is where ip(8) keeps named namespaces.
	netnsDir = "/run/netns"
)

// labName matches a lab namespace and captures the lab id.
var labName = regexp.MustCompile(`^(sbt-[0-9a-f]{6})(-[a-z0-9-]+)?$`)

// claimID picks a fresh lab id and holds its lock file.
func claimID() (string, *os.File, error) {
	if err := os.MkdirAll(LockDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("lock dir: %w", err)
	}
	for range 10 {
		id := Prefix + randomHex(3)
		f, err := os.OpenFile(filepath.Join(LockDir, id+".lock"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("lock %s: %w", id, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			return "", nil, fmt.Errorf("lock %s: %w", id, err)
		}
		return id, f, nil
	}
	return "", nil, errors.New("no free lab id after 10 tries")
}

func releaseID(id string, f *os.File) {
	_ = os.Remove(filepath.Join(LockDir, id+".lock"))
	_ = f.Close()
}

// CleanupStale deletes "sbt-*" namespaces created before this process
// started whose lab lock is not held (their owner died), killing what still
// runs in them. It returns the names it deleted.
func CleanupStale() ([]string, error) {
	start, err := ProcessStart()
	if err != nil {
		return nil, err
	}
	return cleanupStale(start)
}

func cleanupStale(cutoff time.Time) ([]string, error) {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		m := labName.FindStringSubmatch(e.Name())
		if m == nil || !createdBefore(e.Name(), cutoff) || lockHeld(m[1]) {
			continue
		}
		if err := deleteNamespace(e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
		_ = os.Remove(filepath.Join(LockDir, m[1]+".lock"))
	}
	return removed, errors.Join(errs...)
}

// createdBefore reports whether namespace ns was created before cutoff: the
// nsfs inode mounted at /run/netns/NAME carries its creation time.
func createdBefore(ns string, cutoff time.Time) bool {
	fi, err := os.Stat(filepath.Join(netnsDir, ns))
	if err != nil {
		return false
	}
	return fi.ModTime().Before(cutoff)
}

// lockHeld reports whether a live process holds lab id's lock.
func lockHeld(id string) bool {
	f, err := os.OpenFile(filepath.Join(LockDir, id+".lock"), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// ProcessStart returns when this process started (from /proc).
func ProcessStart() (time.Time, error) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return time.Time{}, fmt.Errorf("process start: %w", err)
	}
	ticks, err := startTicks(string(stat))
	if err != nil {
		return time.Time{}, err
	}
	boot, err := bootTime()
	if err != nil {
		return time.Time{}, err
	}
	const userHZ = 100 // USER_HZ, fixed for /proc on Linux
	return boot.Add(time.Duration(ticks) * time.Second / userHZ), nil
}

// startTicks reads field 22 (starttime) of a /proc/PID/stat line. The
// command name (field 2) may hold spaces, so fields count from its ")".
func startTicks(stat string) (uint64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("process start: malformed /proc/self/stat")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 20 {
		return 0, errors.New("process start: short /proc/self/stat")
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("process start: %w", err)
	}
	return v, nil
}

func bootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, fmt.Errorf("boot time: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("boot time: %w", err)
			}
			return time.Unix(s, 0), nil
		}
	}
	return time.Time{}, errors.New("boot time: no btime in /proc/stat")
}
