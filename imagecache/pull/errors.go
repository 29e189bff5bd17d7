package pull

import (
	"errors"
	"fmt"
)

// pullError marks an error no retry can fix: a digest mismatch from a fresh
// download, a full disk, a 404.
type pullError struct{ err error }

func (e *pullError) Error() string { return e.err.Error() }
func (e *pullError) Unwrap() error { return e.err }

// permanent marks err as final; nil stays nil.
func permanent(err error) error {
	if err == nil || isPermanent(err) {
		return err
	}
	return &pullError{err: err}
}

func permanentf(format string, args ...any) error {
	return &pullError{err: fmt.Errorf(format, args...)}
}

func isPermanent(err error) bool {
	var pe *pullError
	return errors.As(err, &pe)
}

var (
	// errDigest is wrapped by digest mismatches.
	errDigest = errors.New("sha256 mismatch")
	// errStalled is an attempt that received nothing for StallTimeout.
	errStalled = errors.New("origin stalled")
)
