package imagecache

import (
	"time"

	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
)

// State is where an image is in its life in the cache.
type State int

// The states. Only StateReady is ever served.
const (
	// StateQueued: wanted, waiting for a pull worker (or for Run).
	StateQueued State = iota + 1
	// StatePulling: a worker is pulling it.
	StatePulling
	// StateReady: verified and served.
	StateReady
	// StateEvicting: removed or evicted while requests were reading it;
	// those finish, new ones get 404, and the blob is deleted after the
	// last one.
	StateEvicting
	// StateFailed: the pull failed (Info.Reason says why); nothing is kept.
	StateFailed
	// StateVerifying: a blob found at Open, or by a request while the
	// cache runs, whose file is not the one verified before (another
	// inode, size, mtime or ctime, or no record of it) is hashed again by
	// Run before it is served; a mismatch
	// deletes it (and pulls it again when wanted).
	StateVerifying
)

var stateNames = map[State]string{
	StateQueued: "queued", StatePulling: "pulling", StateReady: "ready",
	StateEvicting: "evicting", StateFailed: "failed", StateVerifying: "verifying",
}

// String returns the lower-case name used by "image ls" and the metrics.
func (s State) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return "unknown"
}

// Proto maps s to the contract's CachedImageState: queued, pulling and
// verifying are PULLING (on their way, not served yet); failed has no
// contract state (UNSPECIFIED, and Section leaves failed images out).
func (s State) Proto() agentv1.CachedImageState {
	switch s {
	case StateQueued, StatePulling, StateVerifying:
		return agentv1.CachedImageState_CACHED_IMAGE_STATE_PULLING
	case StateReady:
		return agentv1.CachedImageState_CACHED_IMAGE_STATE_READY
	case StateEvicting:
		return agentv1.CachedImageState_CACHED_IMAGE_STATE_EVICTING
	}
	return agentv1.CachedImageState_CACHED_IMAGE_STATE_UNSPECIFIED
}

// Info is one image as "image ls" shows it.
type Info struct {
	SHA256   [32]byte
	URL      string // the origin, query and user info removed
	ImageID  string
	Format   string
	State    State
	Size     int64     // blob size when ready or verifying; the origin's size, when known, while pulling
	Done     int64     // bytes pulled so far (while queued or pulling), or hashed (while verifying)
	LastUsed time.Time // last GET or HEAD, or when it became ready
	Reason   string    // why the last pull failed
	Listed   bool      // listed by the last SetWanted
	Added    bool      // added with Add ("image add")
	Pinned   bool      // referenced by an entry or the ramdisk profile
	Readers  int       // requests reading it now
}

// Released reports whether the image is held only until eviction wants the
// space: neither listed by SetWanted nor added with Add.
func (i Info) Released() bool { return !i.Listed && !i.Added }
