package imagecache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/siteboot/siteboot/internal/atomicfile"
)

// load rebuilds the entries from the index and the files on disk at Open,
// and deletes what a crash or an earlier run left behind. A blob the index
// does not know is hashed again before it is adopted; one the index knows
// but whose file changed since it was verified waits in StateVerifying for
// Run to hash it again.
func (c *Cache) load() error {
	idx, err := readIndex(c.indexPath())
	if err != nil {
		c.log.Warn("imagecache: index unreadable, rebuilding it from the blobs", "err", err)
		idx = indexFile{}
	}
	os.Remove(c.indexPath() + ".tmp") // the torn write of an older version
	if err := atomicfile.RemoveLeftovers(c.indexPath()); err != nil {
		c.log.Warn("imagecache: remove a torn index write", "err", err)
	}
	blobs, err := c.scanBlobs()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, im := range idx.Images {
		e, err := c.fromIndex(im)
		if err != nil {
			c.log.Warn("imagecache: index entry dropped", "err", err)
			continue
		}
		blob, onDisk := blobs[e.digest]
		delete(blobs, e.digest)
		c.placeLocked(e, im, blob, onDisk)
	}
	for d := range blobs {
		c.adoptLocked(d)
	}
	return c.scrubIngestLocked()
}

// placeLocked decides the state of an indexed image from what is on disk:
// ready when the blob is the file that was verified, verifying when it may
// not be (a crash before the index recorded it, or a file changed since).
func (c *Cache) placeLocked(e *entry, im indexImage, blob stamp, onDisk bool) {
	bad := im.State == idxEvicting || im.State == idxReady && im.Size != blob.Size
	switch {
	case onDisk && bad:
		c.log.Info("imagecache: deleting blob", "sha256", im.SHA256, "index_state", im.State, "size", blob.Size)
		c.removeBlob(e.digest)
	case onDisk:
		e.state, e.size, e.stamp = StateReady, blob.Size, blob
		// The index vouches for the blob's size when it recorded the image
		// ready with that size (checked above) or asked for that size. Else
		// (a crash between a pull's commit and the index write, with no size
		// asked) the size is the file's own claim, which the verifier bounds,
		// and stays so in the index until it is verified (a restart
		// before that must not make it a recorded size).
		e.sizeUnvouched = im.SizeUnvouched || im.State != idxReady && im.WantSize != blob.Size
		if im.State != idxReady || im.Verified == nil || *im.Verified != blob {
			e.state, e.stamp = StateVerifying, stamp{}
			c.log.Info("imagecache: blob to verify again before it is served", "sha256", im.SHA256,
				"recorded", im.Verified, "found", blob)
		}
		if e.lastUsed.IsZero() {
			e.lastUsed = c.cfg.Now()
		}
		c.entries[e.digest] = e
		return
	}
	if e.wanted() && e.want.Validate() == nil {
		c.queueLocked(e)
		c.entries[e.digest] = e
	}
}

// adoptLocked takes in a blob the index does not list (the index was lost),
// released, after checking its digest. Nothing vouches for its size, so a
// file that claims more than its file system holds is deleted unread.
func (c *Cache) adoptLocked(d [32]byte) {
	st, ok, err := fileHasDigest(context.Background(), c.blobPath(d), d, -1, nil)
	if err != nil || !ok {
		c.log.Warn("imagecache: deleting unlisted blob that does not verify", "sha256", hexOf(d), "err", err)
		c.removeBlob(d)
		return
	}
	e := c.newEntry(Want{SHA256: d})
	e.state, e.size, e.stamp, e.lastUsed = StateReady, st.Size, st, c.cfg.Now()
	c.entries[d] = e
	c.log.Info("imagecache: adopted unlisted blob", "sha256", hexOf(d), "size", st.Size)
}

// scanBlobs lists the blobs by digest with their files' stamps; anything
// else in the blob directory is deleted.
func (c *Cache) scanBlobs() (map[[32]byte]stamp, error) {
	des, err := os.ReadDir(c.blobDir)
	if err != nil {
		return nil, fmt.Errorf("imagecache: scan blobs: %w", err)
	}
	blobs := make(map[[32]byte]stamp, len(des))
	for _, de := range des {
		d, perr := ParsePath(PathPrefix + de.Name())
		info, ierr := de.Info()
		if perr != nil || ierr != nil || !info.Mode().IsRegular() {
			c.log.Warn("imagecache: deleting stray file in the blob directory", "name", de.Name())
			os.RemoveAll(filepath.Join(c.blobDir, de.Name()))
			continue
		}
		blobs[d] = stampOfInfo(info)
	}
	return blobs, nil
}

// scrubIngestLocked keeps only the partial files of plain pulls still
// queued (they resume); everything else in ingest is deleted.
func (c *Cache) scrubIngestLocked() error {
	des, err := os.ReadDir(c.ingestDir)
	if err != nil {
		return fmt.Errorf("imagecache: scan ingest: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		base, ext, _ := strings.Cut(name, ".")
		d, perr := ParsePath(PathPrefix + base)
		e := c.entries[d]
		keep := perr == nil && (ext == "part" || ext == "ckpt") && e != nil &&
			e.state == StateQueued && e.want.Compression == CompressionNone
		if !keep {
			c.log.Debug("imagecache: deleting ingest leftover", "name", name)
			os.RemoveAll(filepath.Join(c.ingestDir, name))
		}
	}
	return nil
}
