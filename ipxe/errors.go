package ipxe

import (
	"errors"
	"fmt"
	"net/http"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
)

// RequestError is a refused request field: the request changed nothing.
type RequestError struct {
	// Field is the IpxeScriptRequest field (or "query", "base_url").
	Field  string
	Reason string
}

func (e *RequestError) Error() string { return "ipxe: " + e.Field + ": " + e.Reason }

// ErrFenced is returned while the boot lease gate is closed.
var ErrFenced = errors.New("ipxe: this appliance does not hold the boot lease (fenced)")

// UnknownMachineError is a MAC without a live entry, or one whose entry
// pins a product_uuid the request did not present. Script is what such a
// machine is served: a note that it is not registered, and a retry later.
// Reason is empty for a MAC without an entry and says why otherwise.
type UnknownMachineError struct {
	MAC    string
	Reason string
	Script *sitev1.IpxeScript
}

func (e *UnknownMachineError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("ipxe: %s is treated as unknown: %s", e.MAC, e.Reason)
	}
	return fmt.Sprintf("ipxe: %s has no live entry at this site", e.MAC)
}

// SecretError is an entry whose discovery_token_ref could not be resolved.
// It names the ref, never a value.
type SecretError struct {
	Ref string
	Err error
}

func (e *SecretError) Error() string {
	return fmt.Sprintf("ipxe: discovery token ref %s cannot be resolved", e.Ref)
}

func (e *SecretError) Unwrap() error { return e.Err }

// EntryError is an entry (or the ramdisk profile it needs) that cannot be
// rendered into a safe script.
type EntryError struct {
	MAC    string
	Reason string
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("ipxe: entry for %s cannot be rendered: %s", e.MAC, e.Reason)
}

// Script kinds: the values of the kind label of siteboot_ipxe_scripts_total.
const (
	kindBootstrap = "bootstrap"
	kindRamdisk   = "ramdisk"
	kindSanboot   = "sanboot"
	kindChain     = "chain"
	kindUnknown   = "unknown"
	kindMismatch  = "uuid-mismatch"
	kindFenced    = "fenced"
	kindError     = "error"
)

var kinds = []string{kindBootstrap, kindRamdisk, kindSanboot, kindChain, kindUnknown, kindMismatch, kindFenced, kindError}

// classify maps a render error to the HTTP status, the metric kind and the
// plain-text message a client gets. It is the one place errors become
// statuses.
func classify(err error) (status int, kind, msg string) {
	var (
		reqErr     *RequestError
		unknownErr *UnknownMachineError
		secretErr  *SecretError
		entryErr   *EntryError
	)
	switch {
	case err == nil:
		return http.StatusOK, "", ""
	case errors.As(err, &reqErr):
		return http.StatusBadRequest, kindError, reqErr.Error()
	case errors.Is(err, ErrFenced):
		return http.StatusServiceUnavailable, kindFenced, ErrFenced.Error()
	case errors.As(err, &unknownErr):
		return http.StatusOK, kindUnknown, ""
	case errors.As(err, &secretErr):
		return http.StatusInternalServerError, kindError, secretErr.Error()
	case errors.As(err, &entryErr):
		return http.StatusInternalServerError, kindError, entryErr.Error()
	default:
		return http.StatusInternalServerError, kindError, "ipxe: internal error rendering the script"
	}
}
