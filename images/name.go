package images

import (
	"fmt"
	"io/fs"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest boot file name accepted, in bytes (the limit
// site entries put on boot_file).
const MaxNameLen = 255

// kindError is a sentinel that also matches a standard fs error, so callers
// that only know io/fs (the TFTP server) can still tell "not there" from
// "refused".
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// Errors returned by Set.Open, wrapped with the name. ErrNotFound also
// matches fs.ErrNotExist; ErrInvalidName and ErrChanged match
// fs.ErrPermission.
var (
	// ErrInvalidName: the name is not a plain relative slash-separated
	// name (see ValidName).
	ErrInvalidName error = &kindError{"invalid boot file name", fs.ErrPermission}
	// ErrNotFound: the name is valid but no such file is in the set.
	ErrNotFound error = &kindError{"no such boot file", fs.ErrNotExist}
	// ErrChanged: the file on disk is no longer the one hashed at load.
	ErrChanged error = &kindError{"boot file changed since it was hashed", fs.ErrPermission}
)

// ValidName returns nil when name is acceptable as a boot file name: a
// non-empty, valid UTF-8, relative, slash-separated name of at most
// MaxNameLen bytes with no empty, "." or ".." element, no backslash and no
// control character (NUL included). The error wraps ErrInvalidName.
func ValidName(name string) error {
	switch {
	case name == "":
		return invalid("empty")
	case len(name) > MaxNameLen:
		return invalid("longer than %d bytes", MaxNameLen)
	case !utf8.ValidString(name):
		return invalid("not valid UTF-8")
	case strings.HasPrefix(name, "/"):
		return invalid("absolute path")
	case strings.ContainsRune(name, '\\'):
		return invalid("backslash")
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return invalid("control character %U", c)
		}
	}
	for elem := range strings.SplitSeq(name, "/") {
		switch elem {
		case "":
			return invalid("empty path element")
		case ".", "..":
			return invalid("%q path element", elem)
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidName, fmt.Sprintf(format, args...))
}
