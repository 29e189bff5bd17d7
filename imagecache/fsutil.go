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

// syncDir makes the directory entries of dir (renames, creations) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("imagecache: sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("imagecache: sync %s: %w", dir, err)
	}
	return nil
}

// writeFileAtomic replaces path with data: a temporary file in the same
// directory, fsynced, renamed over path, then the directory fsynced. A crash
// leaves either the old or the new content, never a torn file.
func writeFileAtomic(path string, data []byte, syncParent bool) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("imagecache: write %s: %w", filepath.Base(path), err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("imagecache: write %s: %w", filepath.Base(path), err)
	}
	if syncParent {
		return syncDir(filepath.Dir(path))
	}
	return nil
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

// fdatasync makes the data written to f durable, with the size that
// retrieving it needs, but not its other metadata.
func fdatasync(f *os.File) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	return serr
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
