package secretref

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// fileFlags open a secret for reading: O_NONBLOCK so that opening a FIFO
// returns at once (the fstat that follows refuses it), O_NOCTTY so a
// terminal never becomes the controlling one.
const fileFlags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// errSymlink is what a symlink anywhere below the secrets dir yields.
var errSymlink = errors.New("a symlink is in the path (secrets are never reached through one)")

// openBeneath opens rel, a clean relative path, beneath dir without
// following a symlink in any component and without leaving dir. It uses
// openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS; where the kernel (or a
// seccomp filter) refuses openat2 it walks the components with
// O_NOFOLLOW instead. dir itself may be reached through symlinks: it is
// the operator's setting.
func openBeneath(dir, rel string, walk bool) (int, error) {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("secrets.dir %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	if !walk {
		fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{
			Flags:   fileFlags,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.ELOOP):
			return -1, errSymlink
		case errors.Is(err, unix.EXDEV):
			return -1, errors.New("the path leaves secrets.dir")
		case !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.E2BIG):
			return -1, err
		}
	}
	return walkBeneath(dfd, rel)
}

// walkBeneath opens rel beneath dfd one component at a time, each with
// O_NOFOLLOW. rel is clean, so no component is "." or "..".
func walkBeneath(dfd int, rel string) (int, error) {
	parts := strings.Split(rel, "/")
	cur := dfd
	for i, part := range parts {
		flags := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(parts)-1 {
			flags = fileFlags | unix.O_NOFOLLOW
		}
		fd, err := unix.Openat(cur, part, flags, 0)
		if err != nil && isSymlink(cur, part) {
			err = errSymlink
		}
		if cur != dfd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

func isSymlink(dfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}
