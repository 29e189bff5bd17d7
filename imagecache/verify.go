package imagecache

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/siteboot/siteboot/imagecache/pull"
)

// stamp identifies the file a blob was verified in. A write to the file
// through the file system changes its ctime, which no caller can set back,
// and a replacement changes its inode; either makes Open verify the blob
// again before it is served. It does not see a change beneath the file
// system (bit rot on a disk without checksums).
type stamp struct {
	Inode   uint64 `json:"inode"`
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtime_ns"`
	CtimeNs int64  `json:"ctime_ns"`
}

func stampOfInfo(fi os.FileInfo) stamp {
	st := stamp{Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.Inode, st.CtimeNs = sys.Ino, time.Unix(int64(sys.Ctim.Sec), int64(sys.Ctim.Nsec)).UnixNano() // int32 on 32-bit
	}
	return st
}

// stampOfStat is the stamp of the file st describes.
func stampOfStat(st *unix.Stat_t) stamp {
	mt := time.Unix(int64(st.Mtim.Sec), int64(st.Mtim.Nsec)) // int32 on 32-bit
	ct := time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec))
	return stamp{Inode: st.Ino, Size: st.Size, MtimeNs: mt.UnixNano(), CtimeNs: ct.UnixNano()}
}

func stampOf(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stampOfInfo(fi), nil
}

// hashChunk is how much verification hashes between looks at ctx.
const hashChunk = 4 << 20

// fileHasDigest hashes the file at path and compares it with d, counting
// the bytes hashed in done (when not nil) and stopping when ctx ends. It
// returns the stamp of the file it hashed; a file that is written to or
// replaced while it is hashed is an error, so that the stamp a caller
// records is that of the bytes hashed. Nothing put at the path makes it
// read for ever: only a regular file is read (openBlob), and only of size
// bytes, a size the cache recorded. When nothing vouches for the file's
// size (size -1: a blob no index lists), a file that claims more than its
// file system holds is refused unread (a sparse file can claim
// terabytes). That bound is not applied to a recorded size: on a
// compressing file system (btrfs compress=, ZFS lz4) a mostly-zero image
// can be larger than the file system, and must not be deleted and pulled
// again each time it is verified.
func fileHasDigest(ctx context.Context, path string, d [32]byte, size int64, done *pull.Progress) (stamp, bool, error) {
	f, before, err := openBlob(path)
	if err != nil {
		return stamp{}, false, err
	}
	defer f.Close()
	if size >= 0 && before.Size != size {
		return stamp{}, false, fmt.Errorf("the file has %d bytes, the image %d", before.Size, size)
	}
	if size < 0 {
		if fs, err := diskSize(filepath.Dir(path)); err == nil && before.Size > fs {
			return stamp{}, false, fmt.Errorf("the file claims %d bytes, more than its file system holds (%d): not a blob the cache wrote", before.Size, fs)
		}
	}
	h, buf := sha256.New(), make([]byte, 1<<20)
	r := io.LimitReader(f, before.Size) // a file that grows is caught by its stamp below
	for {
		if err := ctx.Err(); err != nil {
			return stamp{}, false, err
		}
		n, err := io.CopyBuffer(h, io.LimitReader(r, hashChunk), buf)
		if err != nil {
			return stamp{}, false, err
		}
		if done != nil {
			done.Done.Add(n)
		}
		if n < hashChunk { // the file ended
			break
		}
	}
	if after, err := lstampOf(path); err != nil || after != before {
		return stamp{}, false, errors.Join(errors.New("the file changed while it was hashed"), err)
	}
	return before, [32]byte(h.Sum(nil)) == d, nil
}

// lstampOf is the stamp of what is at path, not following a link.
func lstampOf(path string) (stamp, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return stamp{}, err
	}
	return stampOfInfo(fi), nil
}

// verifyAll hashes every blob waiting in StateVerifying, pinned ones first,
// then the most recently used, and then waits for a ready blob to be found
// changed on disk, until ctx ends. A blob that verifies is served from then
// on; one that does not is deleted, and pulled again if it is wanted.
func (c *Cache) verifyAll(ctx context.Context) {
	for ctx.Err() == nil {
		e, size, wait := c.nextToVerify()
		if e == nil {
			t := time.NewTimer(wait)
			if wait == 0 { // none waits to be tried again
				t.Stop()
			}
			select {
			case <-ctx.Done():
			case <-c.reverify:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		if c.evictOverCapacity(e) {
			continue
		}
		vctx, cancel := context.WithCancel(ctx)
		c.mu.Lock()
		e.stopVerify = cancel
		c.mu.Unlock()
		st, ok, err := fileHasDigest(vctx, c.blobPath(e.digest), e.digest, size, &e.progress)
		c.mu.Lock()
		e.stopVerify = nil
		c.mu.Unlock()
		stopped := vctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return // still verifying: the next Run starts it again
		}
		if stopped {
			continue // evicted meanwhile; if wanted again since, it is picked again
		}
		if transient(err) {
			c.verifyLater(e, err)
			continue
		}
		c.verified(e, st, ok, err)
	}
}

// evictOverCapacity evicts e unhashed when it is released and larger than
// the capacity on its own: eviction would take it anyway, and hashing a
// blob that size (a sparse file next to an index entry recording
// terabytes) could keep the verifier for hours. A wanted or pinned image
// is always hashed: the operator may have lowered the capacity below an
// image the site still boots, which stays served.
func (c *Cache) evictOverCapacity(e *entry) bool {
	c.mu.Lock()
	if c.cfg.Capacity == 0 || e.size <= c.cfg.Capacity || c.entries[e.digest] != e ||
		e.state != StateVerifying || e.wanted() || c.pinnedLocked(e.digest) {
		c.mu.Unlock()
		return false
	}
	c.log.Info("imagecache: released blob larger than the capacity, evicted without verifying it",
		"sha256", hexOf(e.digest), "size", e.size, "capacity", c.cfg.Capacity)
	c.evictLocked(e)
	c.settleLocked() // unlocks
	c.persistLogged()
	return true
}

// nextToVerify is the entry to verify next and the size its blob must
// have (-1: nothing vouches for it, see fileHasDigest); nil when there is
// none, with the time until one waiting to be tried again is due (0: none
// waits).
func (c *Cache) nextToVerify() (*entry, int64, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var pick *entry
	var wait time.Duration
	for _, e := range c.entries {
		if e.state != StateVerifying {
			continue
		}
		if d := e.verifyAfter.Sub(now); d > 0 {
			if wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		if pick == nil || c.verifyBeforeLocked(e, pick) {
			pick = e
		}
	}
	if pick == nil {
		return nil, 0, wait
	}
	pick.progress.Done.Store(0)
	if pick.sizeUnvouched {
		return pick, -1, 0
	}
	return pick, pick.size, 0
}

// verifyLater puts off verifying e, which could not be read for a
// shortage that says nothing about the file (out of descriptors or
// memory, a lease another process holds on it): other blobs are verified
// meanwhile, and e is tried again after 1 s, then twice as long each time
// up to a minute. One line per episode.
func (c *Cache) verifyLater(e *entry, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.verifyWait == 0 {
		c.log.Warn("imagecache: cannot read a blob to verify it now; trying again later", "sha256", hexOf(e.digest), "err", err)
	}
	e.verifyWait = min(max(2*e.verifyWait, time.Second), time.Minute)
	e.verifyAfter = time.Now().Add(e.verifyWait)
}

// verifyBeforeLocked orders verification: pinned images first (a boot
// entry waits for them), then the most recently used.
func (c *Cache) verifyBeforeLocked(a, b *entry) bool {
	if pa, pb := c.pinnedLocked(a.digest), c.pinnedLocked(b.digest); pa != pb {
		return pa
	}
	return a.lastUsed.After(b.lastUsed)
}

// verified records the outcome of hashing e's blob again: st is the file
// that was hashed.
func (c *Cache) verified(e *entry, st stamp, ok bool, err error) {
	c.mu.Lock()
	if c.entries[e.digest] != e || e.state != StateVerifying {
		c.mu.Unlock() // removed or evicted meanwhile
		return
	}
	e.verifyAfter, e.verifyWait = time.Time{}, 0
	switch {
	case err == nil && ok && st.Size == e.size:
		e.state, e.stamp, e.sizeUnvouched = StateReady, st, false
		c.log.Info("imagecache: blob verified again", "sha256", hexOf(e.digest), "size", e.size)
	default:
		if err == nil {
			err = errors.New("sha256 mismatch")
		}
		c.log.Warn("imagecache: blob failed verification, deleting it", "sha256", hexOf(e.digest), "err", err)
		c.removeBlob(e.digest)
		e.size, e.sizeUnvouched, e.reason = 0, false, fmt.Sprintf("blob on disk failed verification: %v", err)
		if e.wanted() && e.want.Validate() == nil {
			c.queueLocked(e)
		} else {
			delete(c.entries, e.digest)
		}
	}
	c.dirty = true
	c.settleLocked()
	c.persistLogged()
}
