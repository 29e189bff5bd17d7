package bootentry

import "time"

// Entry is one live boot entry as the boot path reads it. Its fields hold
// normalised values (the site state stores only validated entries); a
// reader still checks what it places into a reply with this package's
// rules.
type Entry struct {
	// NodeID is the node the entry belongs to.
	NodeID string
	// MAC is the PXE NIC's address in lowercase colon form.
	MAC string
	// ProductUUID, when set, pins the entry to the machine with this SMBIOS
	// UUID (lowercase 8-4-4-4-12): a request for MAC that presents another
	// UUID, or none, is not answered for this entry. See AcceptsUUID.
	ProductUUID string
	// Arch is the entry's boot arch name (bios, x86_64-efi, arm64-efi,
	// x86_64-efi-http), "" when unspecified.
	Arch string
	// WorkflowID is the workflow the entry was made for.
	WorkflowID string
	// BootFile is the first-stage boot file: a name served by TFTP and
	// /boot/, or an http(s) URL for UEFI HTTP boot; "" for the arch default.
	BootFile string
	// IPXEScriptURL is the entry's own script URL; "" for the ramdisk boot.
	IPXEScriptURL string
	// SanbootSHA256 is the lowercase hex digest of the cached image to
	// sanboot; "" when the entry does not sanboot.
	SanbootSHA256 string
	// DiscoveryTokenRef is the secret ref of the machine's discovery token.
	DiscoveryTokenRef string
	// NotAfter is the server time after which the entry is not answered.
	NotAfter time.Time
}

// LiveAt reports whether the entry may be answered at now: not_after lies
// after it.
func (e *Entry) LiveAt(now time.Time) bool { return e.NotAfter.After(now) }

// AcceptsUUID reports whether a request that presents uuid (normalised, ""
// for none) may be answered for this entry: always for an entry without a
// ProductUUID, and only for exactly that UUID for an entry with one.
func (e *Entry) AcceptsUUID(uuid string) bool {
	return e.ProductUUID == "" || e.ProductUUID == uuid
}
