package images

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"syscall"
)

const (
	maxDepth      = 2    // name elements: "file" or "subdir/file"
	maxDirEntries = 4096 // directory entries examined per directory
	headLen       = 4096 // bytes kept at load to check PE headers
)

// linkRoot is a directory a file may live in: Dir itself or a LinkRoot.
type linkRoot struct {
	path string // absolute, symlinks resolved
	root *os.Root
}

// scanner holds the state of one Load.
type scanner struct {
	set   *Set
	cfg   Config
	roots []linkRoot // roots[0] is Dir
	found []found
	full  bool
	buf   []byte
}

// found is a file chosen by the walk, before hashing.
type found struct {
	name string
	root *os.Root
	rel  string
}

// scan walks the directory, hashes what it takes and picks the defaults.
func (s *Set) scan(cfg Config) error {
	sc := &scanner{set: s, cfg: cfg, buf: make([]byte, 64<<10)}
	if err := sc.openRoots(); err != nil {
		return err
	}
	if err := sc.walk(".", 1); err != nil {
		return err
	}
	heads := map[string][]byte{}
	for _, f := range sc.found {
		e, head, err := sc.hash(f)
		if err != nil {
			s.log.Warn("boot file skipped: cannot hash it", "file", f.name, "err", err)
			continue
		}
		s.files[f.name] = e
		heads[f.name] = head
	}
	s.pickDefaults(cfg.PreferSNP, heads)
	return nil
}

func (sc *scanner) openRoots() error {
	dirs := append([]string{sc.set.dir}, sc.cfg.LinkRoots...)
	for i, d := range dirs {
		abs, err := filepath.Abs(d)
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs)
		}
		var r *os.Root
		if err == nil {
			r, err = os.OpenRoot(abs)
		}
		if err != nil && i == 0 {
			return fmt.Errorf("images: open boot file dir: %w", err)
		}
		if err != nil {
			sc.set.log.Warn("boot file link root ignored", "dir", d, "err", err)
			continue
		}
		sc.set.roots = append(sc.set.roots, r)
		sc.roots = append(sc.roots, linkRoot{path: abs, root: r})
	}
	return nil
}

// walk takes the regular files of dir (a slash path inside Dir) and, above
// maxDepth, descends into real subdirectories.
func (sc *scanner) walk(dir string, depth int) error {
	d, err := sc.roots[0].root.Open(dir)
	if err != nil {
		return fmt.Errorf("images: read %s: %w", dir, err)
	}
	ents, err := d.ReadDir(maxDirEntries)
	_ = d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("images: read %s: %w", dir, err)
	}
	if len(ents) == maxDirEntries {
		sc.set.log.Warn("boot file dir has too many entries; the rest are ignored", "dir", dir, "max", maxDirEntries)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, de := range ents {
		name := path.Join(dir, de.Name())
		if err := sc.visit(name, de, depth); err != nil {
			return err
		}
		if sc.full {
			return nil
		}
	}
	return nil
}

func (sc *scanner) visit(name string, de fs.DirEntry, depth int) error {
	log := sc.set.log.With("file", name)
	switch t := de.Type(); {
	case ValidName(name) != nil:
		log.Debug("boot file skipped: name not servable")
	case t.IsDir() && depth < maxDepth:
		return sc.walk(name, depth+1)
	case t.IsDir():
		log.Debug("boot file skipped: directory too deep", "max_depth", maxDepth)
	case t&fs.ModeSymlink != 0:
		sc.link(name)
	case t.IsRegular():
		sc.take(found{name: name, root: sc.roots[0].root, rel: name})
	default:
		log.Debug("boot file skipped: not a regular file", "mode", t.String())
	}
	return nil
}

// link takes a symlink whose target is a regular file inside Dir or a
// LinkRoot, recording the resolved target so later opens do not follow
// links again.
func (sc *scanner) link(name string) {
	log := sc.set.log.With("file", name)
	target, err := filepath.EvalSymlinks(filepath.Join(sc.roots[0].path, filepath.FromSlash(name)))
	if err != nil {
		log.Info("boot file skipped: broken symlink", "err", err)
		return
	}
	for _, lr := range sc.roots {
		rel, err := filepath.Rel(lr.path, target)
		if err != nil || !filepath.IsLocal(rel) {
			continue
		}
		fi, err := lr.root.Stat(rel)
		if err != nil || !fi.Mode().IsRegular() {
			log.Debug("boot file skipped: symlink to a non-regular file", "target", target)
			return
		}
		sc.take(found{name: name, root: lr.root, rel: filepath.ToSlash(rel)})
		return
	}
	log.Info("boot file skipped: symlink leaves the boot file dir (list its target dir in the link roots to serve it)",
		"target", target)
}

func (sc *scanner) take(f found) {
	if len(sc.found) >= sc.cfg.MaxFiles {
		sc.set.log.Warn("boot file dir has too many files; the rest are skipped", "max_files", sc.cfg.MaxFiles, "first_skipped", f.name)
		sc.full = true
		return
	}
	sc.found = append(sc.found, f)
}

// hash reads one file through a single descriptor and records its digest,
// size and identity; a file that changes while it is read is refused.
func (sc *scanner) hash(f found) (*entry, []byte, error) {
	fd, err := f.root.Open(f.rel)
	if err != nil {
		return nil, nil, err
	}
	defer fd.Close()
	before, err := fd.Stat()
	switch {
	case err != nil:
		return nil, nil, err
	case !before.Mode().IsRegular():
		return nil, nil, errors.New("not a regular file")
	case before.Size() > sc.cfg.MaxFileSize:
		return nil, nil, fmt.Errorf("%d bytes, more than the %d allowed", before.Size(), sc.cfg.MaxFileSize)
	}
	h := sha256.New()
	head := make([]byte, min(before.Size(), headLen))
	if _, err := io.ReadFull(fd, head); err != nil {
		return nil, nil, err
	}
	h.Write(head)
	// One byte past the size, so a file that grew is noticed.
	n, err := io.CopyBuffer(h, io.LimitReader(fd, before.Size()-int64(len(head))+1), sc.buf)
	if err != nil {
		return nil, nil, err
	}
	after, err := fd.Stat()
	if err != nil {
		return nil, nil, err
	}
	if int64(len(head))+n != before.Size() || !sameState(before, after) {
		return nil, nil, errors.New("changed while it was hashed")
	}
	e := &entry{File: File{Name: f.name, Size: before.Size(), ModTime: before.ModTime()}, root: f.root, rel: f.rel, info: before}
	h.Sum(e.SHA256[:0])
	e.etag = `"` + hex.EncodeToString(e.SHA256[:]) + `"`
	return e, head, nil
}

// sameState reports whether two stats of a file show the same file with
// the same size, mtime and ctime: a write through the file system changes
// the ctime, which, unlike the mtime, cannot be set back.
func sameState(a, b fs.FileInfo) bool {
	return a.Size() == b.Size() && a.ModTime().Equal(b.ModTime()) && os.SameFile(a, b) && ctime(a) == ctime(b)
}

// ctime is a stat's change time in ns, 0 where the platform gives none.
func ctime(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim.Nano()
	}
	return 0
}
