package secretref

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxSize bounds what a file ref may hold.
const MaxSize = 64 << 10

// Resolver reads secret values, only where its Policy allows: the same
// Check that refuses a ref when it is stored refuses it again when it is
// read, and a file is opened beneath Policy.Dir without following any
// symlink, must be a regular file with one link and at most MaxSize bytes.
// Its errors name the reference, never the value. The zero Resolver has
// the default policy and no environment.
type Resolver struct {
	// Policy says which refs may be read.
	Policy Policy
	// LookupEnv reads the environment (os.LookupEnv in the appliance).
	LookupEnv func(string) (string, bool)
}

// Check is r.Policy.Check.
func (r Resolver) Check(ref string) error { return r.Policy.Check(ref) }

// Resolve returns the value a reference points to. It returns at once
// when ctx is done and checks ctx between reads; opening never blocks
// (a FIFO or device is refused, not read).
func (r Resolver) Resolve(ctx context.Context, ref string) ([]byte, error) {
	p, err := r.Policy.check(ref)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("secret ref %q: %w", ref, err)
	}
	if p.Scheme == SchemeEnv {
		if r.LookupEnv == nil {
			return nil, fmt.Errorf("secret ref %q: variable not set (no environment)", ref)
		}
		v, ok := r.LookupEnv(p.Name)
		if !ok {
			return nil, fmt.Errorf("secret ref %q: variable not set", ref)
		}
		return []byte(v), nil
	}
	b, err := readFile(ctx, r.Policy.withDefaults(), p, false)
	if err != nil {
		return nil, fmt.Errorf("secret ref %q: %w", ref, err)
	}
	return b, nil
}

// readFile reads the file of a checked ref; walk forces the
// component-by-component open that stands in for openat2.
func readFile(ctx context.Context, pol Policy, p Ref, walk bool) ([]byte, error) {
	rel := strings.TrimPrefix(p.Name, pol.Dir+"/")
	fd, err := openBeneath(pol.Dir, rel, walk)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := checkOpened(fd, pol.Deny); err != nil {
		return nil, err
	}
	if err := deniedOnPath(pol.Dir, rel, fd, pol.Deny); err != nil {
		return nil, err
	}
	return readAll(ctx, fd)
}

// checkOpened refuses anything but a regular file with one link and at
// most MaxSize bytes, and a file that /proc says lies in a denied path.
// A second hard link could be another name of a file outside the dir,
// such as the node key.
func checkOpened(fd int, deny []string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG {
		return fmt.Errorf("not a regular file (it is a %s)", fileType(t))
	}
	// Where /proc is missing this check is left to Policy.Validate.
	if real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil {
		for _, d := range deny {
			if overlaps(real, realPath(d)) {
				return fmt.Errorf("the file is %s, inside %s, which is never resolvable", real, d)
			}
		}
	}
	if st.Nlink != 1 {
		return fmt.Errorf("the file has %d hard links; a secret file must have exactly one", st.Nlink)
	}
	if st.Size > MaxSize {
		return fmt.Errorf("the file is %d bytes, more than %d", st.Size, MaxSize)
	}
	return nil
}

// readAll reads up to MaxSize bytes (the file may have grown since the
// fstat) and drops one trailing newline.
func readAll(ctx context.Context, fd int) ([]byte, error) {
	buf := make([]byte, 0, 4096)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		if n == 0 {
			return bytes.TrimSuffix(buf, []byte("\n")), nil
		}
		if buf = buf[:len(buf)+n]; len(buf) > MaxSize {
			return nil, fmt.Errorf("the file grew past %d bytes", MaxSize)
		}
	}
}

func fileType(t uint32) string {
	switch t {
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "file of type " + strconv.FormatUint(uint64(t), 8)
}
