package site

import (
	"errors"
	"fmt"
)

// FieldError is a refused request field. Field is a path into the request
// ("entries[1].mac"); the message names it first so an operator sees at once
// what to fix.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ConflictError is a MAC that already belongs to another node. A MAC belongs
// to one node only; the other node must clean it up first.
type ConflictError struct {
	Field string
	MAC   string
	Owner string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s: %s already belongs to node %q (clean it up there first)", e.Field, e.MAC, e.Owner)
}

// LimitError is a request or state that would exceed a fixed bound.
type LimitError struct {
	Reason string
}

func (e *LimitError) Error() string { return e.Reason }

// ErrUnknownCommand is returned by the state machine for a command it cannot
// decode or does not know; the state is left unchanged.
var ErrUnknownCommand = errors.New("site: unknown command")

// NotReadyError is an entry that would sanboot an image the cache does not
// hold verified. Such an entry is never stored: it could never be answered.
type NotReadyError struct {
	Field  string
	Digest string
}

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("%s: image %s is not READY in this appliance's cache (add it with 'siteboot image add' or the site spec, and wait for the pull)", e.Field, e.Digest)
}
