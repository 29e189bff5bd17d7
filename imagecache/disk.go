package imagecache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockDir takes an exclusive advisory lock on path, so two processes never
// share a data directory. The kernel drops it when the process dies.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("imagecache: open lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("imagecache: %s is in use by another process", filepath.Dir(path))
		}
		return nil, fmt.Errorf("imagecache: lock %s: %w", path, err)
	}
	return f, nil
}

// freeBytes is the space available to this process on dir's file system.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("imagecache: statfs %s: %w", dir, err)
	}
	free := st.Bavail * uint64(st.Bsize)
	if free > 1<<62 {
		free = 1 << 62
	}
	return int64(free), nil
}

// diskSize is the size of dir's file system.
func diskSize(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("imagecache: statfs %s: %w", dir, err)
	}
	return int64(min(st.Blocks*uint64(st.Bsize), 1<<62)), nil
}

// openBlob opens a blob for reading as a plain blocking descriptor: a
// regular file gains nothing from Go's netpoller, and registering it costs
// an fcntl pair and a failing epoll_ctl on every request. Sendfile reads
// from it all the same.
func openBlob(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
