package secretref

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Defaults of Policy.
const (
	DefaultDir       = "/etc/siteboot/secrets"
	DefaultEnvPrefix = "SITEBOOT_SECRET_"
)

// Policy says which secret refs may be resolved: file:// refs only to
// files beneath Dir, env:// refs only to variables whose names start with
// EnvPrefix, and nothing at or beneath a Deny path. The zero Policy is the
// default one.
type Policy struct {
	// Dir is the only directory whose files file:// refs may name, at any
	// depth (DefaultDir if empty). It must be absolute and clean.
	Dir string
	// EnvPrefix starts the name of every variable env:// refs may name
	// (DefaultEnvPrefix if empty).
	EnvPrefix string
	// Deny are absolute paths never resolvable, with everything beneath
	// them: the appliance's data dir, which holds its node key.
	Deny []string
}

// PolicyError is a Policy that cannot be used. Field is "dir" or
// "env_prefix", the setting at fault.
type PolicyError struct {
	Field string
	Err   error
}

func (e *PolicyError) Error() string { return "secret policy " + e.Field + ": " + e.Err.Error() }

func (e *PolicyError) Unwrap() error { return e.Err }

func (p Policy) withDefaults() Policy {
	if p.Dir == "" {
		p.Dir = DefaultDir
	}
	if p.EnvPrefix == "" {
		p.EnvPrefix = DefaultEnvPrefix
	}
	return p
}

// Validate checks the policy itself: Dir absolute and clean and neither
// equal to, inside nor around a Deny path, EnvPrefix a valid start of a
// variable name. It compares both the paths as written and, for the parts
// that exist, as symlinks resolve them, so it may stat the file system.
func (p Policy) Validate() error {
	p = p.withDefaults()
	if err := p.validLexically(); err != nil {
		return err
	}
	dir := realPath(p.Dir)
	var st unix.Stat_t
	if unix.Stat(p.Dir, &st) == nil {
		if d, ok := denyIDs(p.Deny)[idOf(&st)]; ok {
			return &PolicyError{"dir", fmt.Errorf("%s is %s (mounted there); secrets must live apart from it", p.Dir, d)}
		}
	}
	for _, d := range p.Deny {
		if real := realPath(d); overlaps(dir, real) {
			return &PolicyError{"dir", fmt.Errorf("%s resolves to %s, which overlaps %s (%s); secrets must live apart from it", p.Dir, dir, d, real)}
		}
	}
	return nil
}

// validLexically is Validate without file system access.
func (p Policy) validLexically() error {
	if !filepath.IsAbs(p.Dir) || filepath.Clean(p.Dir) != p.Dir || p.Dir == "/" {
		return &PolicyError{"dir", fmt.Errorf("%q must be an absolute, clean path other than /", p.Dir)}
	}
	if !validEnvName(p.EnvPrefix) {
		return &PolicyError{"env_prefix", fmt.Errorf("%q must be a variable name prefix of [A-Za-z_][A-Za-z0-9_]*", p.EnvPrefix)}
	}
	for _, d := range p.Deny {
		if !filepath.IsAbs(d) {
			return &PolicyError{"dir", fmt.Errorf("denied path %q is not absolute", d)}
		}
		if overlaps(p.Dir, filepath.Clean(d)) {
			return &PolicyError{"dir", fmt.Errorf("%s overlaps %s; secrets must live apart from it", p.Dir, filepath.Clean(d))}
		}
	}
	return nil
}

// Check reports whether ref may be resolved under the policy, without any
// I/O: it is meant for the moment a ref is stored. The error names the ref
// (unless it is not even of the form env://… or file://…, so a value
// pasted in place of a ref is never echoed) and says why.
func (p Policy) Check(ref string) error {
	_, err := p.check(ref)
	return err
}

// check is Check returning the parsed ref.
func (p Policy) check(ref string) (Ref, error) {
	p = p.withDefaults()
	r, err := Parse(ref)
	if err != nil {
		return Ref{}, refused(ref, err)
	}
	if err := p.validLexically(); err != nil {
		return Ref{}, refused(ref, err)
	}
	switch r.Scheme {
	case SchemeEnv:
		if !strings.HasPrefix(r.Name, p.EnvPrefix) || r.Name == p.EnvPrefix {
			return Ref{}, refused(ref, fmt.Errorf("variable %s does not start with secrets.env_prefix %s (only such variables are secrets)", r.Name, p.EnvPrefix))
		}
	case SchemeFile:
		if !beneath(p.Dir, r.Name) {
			return Ref{}, refused(ref, fmt.Errorf("%s is not beneath secrets.dir %s", r.Name, p.Dir))
		}
		for _, d := range p.Deny {
			if overlaps(r.Name, filepath.Clean(d)) {
				return Ref{}, refused(ref, fmt.Errorf("%s is inside %s, which is never resolvable", r.Name, d))
			}
		}
	}
	return r, nil
}

// refused wraps why ref is refused, naming ref only when its scheme is
// one of ours: Parse's own errors never repeat a whole ref, so a value
// pasted where a ref belongs is not echoed.
func refused(ref string, err error) error {
	if scheme, _, ok := strings.Cut(ref, "://"); ok && len(ref) <= MaxLen && (scheme == string(SchemeEnv) || scheme == string(SchemeFile)) {
		return fmt.Errorf("secret ref %q refused: %w", ref, err)
	}
	return err
}

// beneath reports whether clean absolute path p lies strictly beneath dir.
func beneath(dir, p string) bool {
	return strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") && len(p) > len(dir)+1
}

// overlaps reports whether one of two clean absolute paths is the other or
// lies beneath it.
func overlaps(a, b string) bool { return a == b || beneath(a, b) || beneath(b, a) }

// realPath resolves the symlinks of the longest existing prefix of p and
// appends the rest; p itself when nothing of it resolves.
func realPath(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		} else if !errors.Is(err, os.ErrNotExist) {
			return p
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
