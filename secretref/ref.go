package secretref

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Scheme is the kind of store a Ref points into.
type Scheme string

// The schemes a Ref may use.
const (
	SchemeEnv  Scheme = "env"
	SchemeFile Scheme = "file"
)

// MaxLen bounds the length of a reference.
const MaxLen = 1024

// Ref is a parsed secret reference.
type Ref struct {
	Scheme Scheme
	// Name is the variable name (env) or the absolute, clean path (file).
	Name string
}

// String returns the reference in its canonical form.
func (r Ref) String() string {
	if r.Scheme == SchemeFile {
		return "file://" + r.Name
	}
	return string(r.Scheme) + "://" + r.Name
}

// Parse checks the syntax of a reference. It never reads the secret.
func Parse(s string) (Ref, error) {
	if len(s) > MaxLen {
		return Ref{}, fmt.Errorf("secret ref longer than %d bytes", MaxLen)
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return Ref{}, errors.New("secret ref must be env://NAME or file:///path")
	}
	switch Scheme(scheme) {
	case SchemeEnv:
		if !validEnvName(rest) {
			return Ref{}, fmt.Errorf("env:// ref needs a variable name of [A-Za-z_][A-Za-z0-9_]*, got %q", rest)
		}
		return Ref{Scheme: SchemeEnv, Name: rest}, nil
	case SchemeFile:
		if !strings.HasPrefix(rest, "/") || strings.ContainsRune(rest, 0) {
			return Ref{}, errors.New("file:// ref needs an absolute path (file:///path)")
		}
		if filepath.Clean(rest) != rest {
			return Ref{}, fmt.Errorf("file:// ref path %q is not clean", rest)
		}
		return Ref{Scheme: SchemeFile, Name: rest}, nil
	default:
		return Ref{}, fmt.Errorf("secret ref scheme %q unknown (want env or file)", scheme)
	}
}

func validEnvName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i, c := range s {
		letter := c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
		digit := c >= '0' && c <= '9'
		if !letter && !(digit && i > 0) {
			return false
		}
	}
	return true
}
