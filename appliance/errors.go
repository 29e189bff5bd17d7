package appliance

import (
	"encoding/hex"
	"fmt"
)

// StartingError is an operation asked of an appliance that has not restored
// its replicated state yet (raft is still replaying its log or electing).
// Answering from that state would report entries and images as gone.
type StartingError struct {
	// Raft is the raft role at the time ("Follower", "Candidate", …).
	Raft string
}

func (e *StartingError) Error() string {
	return fmt.Sprintf("the appliance is starting: its state is not restored yet (raft %s); try again in a moment", e.Raft)
}

// ImageInSpecError is a hand removal of an image the site spec lists: the
// spec owns it, so only a spec without it releases it.
type ImageInSpecError struct {
	Digest [32]byte
}

func (e *ImageInSpecError) Error() string {
	return fmt.Sprintf("image %s is listed by the site spec: apply a spec without it", hex.EncodeToString(e.Digest[:]))
}

// ImagePinnedError is a removal of an image an entry sanboots or the ramdisk
// profile loads.
type ImagePinnedError struct {
	Digest [32]byte
}

func (e *ImagePinnedError) Error() string {
	return fmt.Sprintf("image %s is pinned: an entry's sanboot_sha256 or the ramdisk profile needs it", hex.EncodeToString(e.Digest[:]))
}

// ImageNotFoundError is an image the cache neither holds nor wants.
type ImageNotFoundError struct {
	Digest [32]byte
}

func (e *ImageNotFoundError) Error() string {
	return fmt.Sprintf("image %s: the cache neither holds nor wants it", hex.EncodeToString(e.Digest[:]))
}

// ImageFailedError is a pull that failed; Reason says why.
type ImageFailedError struct {
	Digest [32]byte
	Reason string
}

func (e *ImageFailedError) Error() string {
	return fmt.Sprintf("image %s failed: %s", hex.EncodeToString(e.Digest[:]), e.Reason)
}
