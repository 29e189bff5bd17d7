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

// errNotRegular is openBlob's error for a blob path that holds anything
// but a regular file: a FIFO, a device, a directory, a symbolic link.
var errNotRegular = errors.New("not a regular file")

// openBlob opens a blob for reading as a plain blocking descriptor, and
// returns the stamp of the file it opened. A regular file gains nothing
// from Go's netpoller, and registering it costs an fcntl pair and a
// failing epoll_ctl on every request; sendfile reads from it all the same.
//
// Only a regular file is opened (errNotRegular otherwise), and nothing
// put at the path can make the open wait: the open does not follow a
// symbolic link (a link to /dev/zero would be hashed forever) and is
// non-blocking (opening a FIFO for reading waits for a writer), and the
// descriptor is made blocking again once fstat shows a regular file.
func openBlob(path string) (*os.File, stamp, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	for errors.Is(err, unix.EINTR) { // a signal, on a network or FUSE file system
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) { // a link; a socket
		err = errNotRegular
	}
	if err != nil {
		return nil, stamp{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		err = errNotRegular
	}
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0) // O_NONBLOCK off
	}
	if err != nil {
		unix.Close(fd)
		return nil, stamp{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), stampOfStat(&st), nil
}

// transient reports whether err is a shortage of the process or the
// system (descriptors, memory, a signal, a lease held by another process):
// it says nothing about the file, which is neither verified again nor
// deleted for it. A flood of connections that runs the process out of
// descriptors must not send every blob back to be hashed.
func transient(err error) bool {
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.EINTR, unix.EAGAIN, unix.ENOBUFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
