package secretref

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// fileID is what a file is, whatever name or mount reaches it.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), st.Ino} }

// denyIDs maps the identity of each existing Deny path to that path.
func denyIDs(deny []string) map[fileID]string {
	ids := make(map[fileID]string, len(deny))
	for _, d := range deny {
		var st unix.Stat_t
		if unix.Stat(d, &st) == nil {
			ids[idOf(&st)] = d
		}
	}
	return ids
}

// deniedOnPath refuses a file opened as fd from dir/rel when it, dir or a
// directory between them is a Deny path by identity. Paths alone miss a
// bind mount: it is no symlink, adds no link, and /proc names it by where
// it is mounted, so the data dir (or a TLS key) bind-mounted beneath the
// secrets dir would otherwise resolve.
func deniedOnPath(dir, rel string, fd int, deny []string) error {
	ids := denyIDs(deny)
	if len(ids) == 0 {
		return nil
	}
	denied := func(fd int, what string) error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if d, ok := ids[idOf(&st)]; ok {
			return fmt.Errorf("%s is %s (mounted there), which is never resolvable", what, d)
		}
		return nil
	}
	if err := denied(fd, "the file"); err != nil {
		return err
	}
	cur, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("secrets.dir %s: %w", dir, err)
	}
	parts := strings.Split(rel, "/")
	for i := 0; ; i++ {
		err := denied(cur, dir+"/"+strings.Join(parts[:i], "/"))
		if err != nil || i == len(parts)-1 {
			unix.Close(cur)
			return err
		}
		next, err := unix.Openat(cur, parts[i], unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil {
			return err
		}
		cur = next
	}
}
