package images

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/siteboot/siteboot/internal/ratelimit"
)

// Default bounds of a scan.
const (
	DefaultMaxFiles    = 256
	DefaultMaxFileSize = 64 << 20
)

// DefaultDirs returns the directories Load tries, in order, when
// Config.Dir is empty: where Debian/Ubuntu (package ipxe) and other
// distributions install iPXE builds.
func DefaultDirs() []string { return []string{"/usr/lib/ipxe", "/usr/share/ipxe"} }

// Config configures Load.
type Config struct {
	// Dir is the boot file directory (boot_files.dir). Empty: the first of
	// DefaultDirs that exists. Files directly in Dir and one level of
	// subdirectories below it ("arm64-efi/ipxe.efi") are taken.
	Dir string
	// PreferSNP makes the snponly/snp builds (iPXE over the firmware's own
	// network driver) the EFI defaults, ipxe.efi (iPXE's own drivers) the
	// fallback. Without it the order is the other way round.
	PreferSNP bool
	// LinkRoots are directories outside Dir that a symbolic link in Dir may
	// resolve into. By default a link leaving Dir is skipped. Debian's ipxe
	// package installs /usr/lib/ipxe/ipxe.efi as a link to /boot/ipxe.efi:
	// list "/boot" here to serve it (only files linked from Dir are taken).
	LinkRoots []string
	// MaxFiles bounds the number of files taken (DefaultMaxFiles if zero);
	// MaxFileSize bounds each file (DefaultMaxFileSize if zero). Files past
	// either bound are skipped with a warning.
	MaxFiles    int
	MaxFileSize int64
	// Logger receives the load summary and warnings (discarded if nil).
	Logger *slog.Logger
}

// File describes one boot file of a Set.
type File struct {
	// Name is the slash-separated name relative to the directory, as
	// clients request it ("undionly.kpxe", "arm64-efi/ipxe.efi").
	Name string
	// Arches are the arches this file is the default boot file for.
	Arches []string
	// Size is the file size in bytes; SHA256 the digest of its content.
	Size   int64
	SHA256 [32]byte
	// ModTime is the modification time seen at load.
	ModTime time.Time
}

// Set is the loaded boot file set. It is safe for concurrent use.
type Set struct {
	dir      string
	log      *slog.Logger
	roots    []*os.Root
	files    map[string]*entry
	defaults map[string]string
	logs     *ratelimit.Stages // served lines, per client address and file
}

// entry is a File plus where it lives and what it looked like at load.
type entry struct {
	File
	root   *os.Root
	rel    string      // path inside root
	info   fs.FileInfo // from the descriptor that was hashed
	etag   string
	warned atomic.Bool // a change was logged at Warn already
}

// Load scans the boot file directory once and hashes what it takes. A
// missing directory, or one without any boot file, yields a usable Set and
// one warning; an unreadable Dir or one that is not a directory is an
// error.
func Load(cfg Config) (*Set, error) {
	if cfg.MaxFiles < 0 || cfg.MaxFileSize < 0 {
		return nil, errors.New("images: MaxFiles and MaxFileSize must not be negative")
	}
	if cfg.MaxFiles == 0 {
		cfg.MaxFiles = DefaultMaxFiles
	}
	if cfg.MaxFileSize == 0 {
		cfg.MaxFileSize = DefaultMaxFileSize
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Set{log: log, files: map[string]*entry{}, defaults: map[string]string{}, logs: newLogLimit()}
	dir, err := pickDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if dir == "" {
		s.warnNone(cfg.Dir)
		return s, nil
	}
	s.dir = dir
	if err := s.scan(cfg); err != nil {
		_ = s.Close()
		return nil, err
	}
	s.logSummary(cfg.Dir)
	return s, nil
}

// pickDir returns the directory to scan, or "" when there is none.
func pickDir(dir string) (string, error) {
	tries := []string{dir}
	if dir == "" {
		tries = DefaultDirs()
	}
	for _, d := range tries {
		fi, err := os.Stat(d)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return "", fmt.Errorf("images: boot file dir: %w", err)
		case !fi.IsDir():
			return "", fmt.Errorf("images: boot file dir %s is not a directory", d)
		}
		return d, nil
	}
	return "", nil
}

// Dir returns the directory the set was loaded from ("" when none was
// found).
func (s *Set) Dir() string { return s.dir }

// BootFile returns the default boot file name for a client arch (see
// Arches; candidates documents the names looked for). ok is false when the
// set has none for that arch.
func (s *Set) BootFile(arch string) (name string, ok bool) {
	name, ok = s.defaults[arch]
	return name, ok
}

// Files returns the files of the set sorted by name.
func (s *Set) Files() []File {
	out := make([]File, 0, len(s.files))
	for _, e := range s.files {
		f := e.File
		f.Arches = append([]string(nil), e.Arches...)
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns the file with exactly this name.
func (s *Set) Lookup(name string) (File, bool) {
	e, ok := s.files[name]
	if !ok {
		return File{}, false
	}
	f := e.File
	f.Arches = append([]string(nil), e.Arches...)
	return f, true
}

// Close releases the directory handles; Open fails afterwards.
func (s *Set) Close() error {
	var errs []error
	for _, r := range s.roots {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}
