package images

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Open opens the boot file with exactly this name for reading and returns
// it with its size. It refuses an invalid name (ErrInvalidName), a name not
// in the set (ErrNotFound) and a file whose size, mtime, ctime or identity
// differs from what was hashed at load (ErrChanged, logged at Warn the first time),
// so every byte served matches the digest Files shows. Running out of file
// descriptors (EMFILE, ENFILE) is returned as that, not as ErrChanged. The
// caller closes the file.
func (s *Set) Open(name string) (*os.File, int64, error) {
	if err := ValidName(name); err != nil {
		return nil, 0, fmt.Errorf("images: open %q: %w", name, err)
	}
	e, ok := s.files[name]
	if !ok {
		return nil, 0, fmt.Errorf("images: open %q: %w", name, ErrNotFound)
	}
	f, err := e.root.Open(e.rel)
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		// Out of file descriptors: a passing shortage, not a changed file.
		return nil, 0, fmt.Errorf("images: open %q: %w", name, err)
	}
	if err != nil {
		s.changed(e, "cannot open it any more", err)
		return nil, 0, fmt.Errorf("images: open %q: %w: %w", name, ErrChanged, err)
	}
	fi, err := f.Stat()
	if err == nil && !sameState(e.info, fi) {
		err = fmt.Errorf("now %d bytes, modified %s", fi.Size(), fi.ModTime().UTC().Format(time.RFC3339Nano))
	}
	if err != nil {
		_ = f.Close()
		s.changed(e, "changed on disk", err)
		return nil, 0, fmt.Errorf("images: open %q: %w: %w", name, ErrChanged, err)
	}
	return f, e.Size, nil
}

// changed logs a refused changed file: at Warn once per file, then at
// Debug.
func (s *Set) changed(e *entry, what string, err error) {
	log := s.log.Debug
	if e.warned.CompareAndSwap(false, true) {
		log = s.log.Warn
	}
	log("boot file refused: "+what+" since it was hashed; restart siteboot to rehash it",
		"file", e.Name, "size", e.Size, "sha256", hex.EncodeToString(e.SHA256[:]), "err", err)
}
