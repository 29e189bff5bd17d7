// Package relayerr is the one vocabulary of failure the relays (package
// bmc and package httpproxy) report: a stable lowercase code a program can
// switch on, and a message for people that never holds a secret.
package relayerr

import (
	"errors"
	"fmt"
)

// The codes. They are part of the admin API: never rename one.
const (
	// ForbiddenTarget: the target is not on the allow-list (bmc.networks,
	// the node's proxy_targets, a denied range). Nothing was sent.
	ForbiddenTarget = "forbidden-target"
	// InvalidArgs: the request is malformed (operation, args_json,
	// driver_options_json, URL, method, header, timeout).
	InvalidArgs = "invalid-args"
	// Unsupported: the driver or the BMC cannot do this operation.
	Unsupported = "unsupported"
	// CredentialsUnavailable: a secret ref could not be read or is not in
	// the expected form.
	CredentialsUnavailable = "credentials-unavailable"
	// Unreachable: no connection to the target (refused, no route, DNS).
	Unreachable = "unreachable"
	// AuthFailed: the target refused the credentials.
	AuthFailed = "auth-failed"
	// PinMismatch: the target's certificate does not match the SPKI pin.
	PinMismatch = "pin-mismatch"
	// TLSFailed: the TLS handshake failed for another reason.
	TLSFailed = "tls-failed"
	// Timeout: the operation's deadline passed.
	Timeout = "timeout"
	// Busy: too many operations at once (for this BMC or in all).
	Busy = "busy"
	// BMCError: the BMC answered, but refused or failed the operation.
	BMCError = "bmc-error"
	// Internal: a fault of the appliance.
	Internal = "internal"
)

// Error is a relay failure.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// New returns an *Error with a formatted message. The message must never
// hold a secret value: callers format only what the request named.
func New(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Code returns err's code: the code of an *Error in its chain, else
// Internal.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}
