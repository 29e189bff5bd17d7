package imagecache

import (
	"errors"
	"fmt"
)

// Errors Remove and Wait return; the admin API maps them to status codes.
var (
	// ErrNotFound: the cache has no such image.
	ErrNotFound = errors.New("imagecache: image not in the cache")
	// ErrPinned: an entry's sanboot_sha256 or the ramdisk profile needs it.
	ErrPinned = errors.New("imagecache: image is referenced by a boot entry or the ramdisk profile")
	// ErrWanted: the last SetWanted lists it (the site spec, or whatever
	// else the caller keeps wanted); drop it from there first.
	ErrWanted = errors.New("imagecache: image is wanted by the site (listed in SetWanted)")
)

// FailedError is Wait's error for an image whose pull failed.
type FailedError struct {
	SHA256 [32]byte
	Reason string
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("imagecache: pull of %s failed: %s", hexOf(e.SHA256), e.Reason)
}
