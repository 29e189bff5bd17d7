package imagecache

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/siteboot/siteboot/internal/atomicfile"
)

const indexVersion = 1

// Index states: what survives a restart. Queued and pulling are "wanted".
const (
	idxReady    = "ready"
	idxWanted   = "wanted"
	idxFailed   = "failed"
	idxEvicting = "evicting"
)

// indexFile is <Dir>/index.json: the images' metadata. Blobs are the truth
// about what is held; the index adds where they came from, whether they
// are wanted, when they were last used, and the file each ready blob was
// verified in. Mode 0600: URLs may be pre-signed.
type indexFile struct {
	Version int          `json:"version"`
	Images  []indexImage `json:"images"`
}

type indexImage struct {
	SHA256       string    `json:"sha256"`
	URL          string    `json:"url,omitempty"`
	Format       string    `json:"format,omitempty"`
	ImageID      string    `json:"image_id,omitempty"`
	Compression  string    `json:"compression,omitempty"`
	SourceSHA256 string    `json:"source_sha256,omitempty"`
	WantSize     int64     `json:"want_size,omitempty"`
	State        string    `json:"state"`
	Size         int64     `json:"size,omitempty"`
	Verified     *stamp    `json:"verified,omitempty"` // the blob's file when verified; absent: verify again
	LastUsed     time.Time `json:"last_used,omitzero"`
	Reason       string    `json:"reason,omitempty"`
	Listed       bool      `json:"listed,omitempty"`
	Added        bool      `json:"added,omitempty"`

	// SizeUnvouched: the blob's size is only the file's own claim
	// (entry.sizeUnvouched), kept until it is verified, across restarts.
	SizeUnvouched bool `json:"size_unvouched,omitempty"`
}

// persist writes the index from the current entries.
func (c *Cache) persist() error {
	c.indexMu.Lock()
	defer c.indexMu.Unlock()
	c.mu.Lock()
	idx := c.snapshotLocked()
	c.dirty = false
	c.mu.Unlock()
	data, err := json.MarshalIndent(idx, "", " ")
	if err != nil {
		return fmt.Errorf("imagecache: encode index: %w", err)
	}
	if err := atomicfile.Write(c.indexPath(), data); err != nil {
		return fmt.Errorf("imagecache: write index: %w", err)
	}
	return nil
}

// persistLogged is persist for paths that have no caller to return to.
func (c *Cache) persistLogged() {
	if err := c.persist(); err != nil {
		c.log.Error("imagecache: persist index", "err", err)
	}
}

func (c *Cache) snapshotLocked() indexFile {
	idx := indexFile{Version: indexVersion, Images: make([]indexImage, 0, len(c.entries))}
	for _, e := range c.entries {
		idx.Images = append(idx.Images, toIndex(e))
	}
	slices.SortFunc(idx.Images, func(a, b indexImage) int { return strings.Compare(a.SHA256, b.SHA256) })
	return idx
}

func toIndex(e *entry) indexImage {
	im := indexImage{
		SHA256: hexOf(e.digest), URL: e.want.URL, Format: e.want.Format, ImageID: e.want.ImageID,
		Compression: e.want.Compression, SourceSHA256: hex.EncodeToString(e.want.SourceSHA256), WantSize: e.want.Size,
		Size: e.size, LastUsed: e.lastUsed, Reason: e.reason, Listed: e.listed, Added: e.added,
	}
	switch e.state {
	case StateReady:
		im.State = idxReady
		st := e.stamp
		im.Verified = &st
	case StateVerifying:
		im.State = idxReady // no stamp: verified again at the next Open
		im.SizeUnvouched = e.sizeUnvouched
	case StateEvicting:
		im.State = idxEvicting
	case StateFailed:
		im.State = idxFailed
	default:
		im.State = idxWanted
	}
	return im
}

// readIndex loads the index; a missing file is an empty index.
func readIndex(path string) (indexFile, error) {
	var idx indexFile
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return idx, fmt.Errorf("imagecache: read index: %w", err)
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return indexFile{}, fmt.Errorf("imagecache: decode index: %w", err)
	}
	if idx.Version != indexVersion {
		return indexFile{}, fmt.Errorf("imagecache: index version %d, want %d", idx.Version, indexVersion)
	}
	return idx, nil
}

// fromIndex rebuilds an entry's metadata; the caller decides its state.
func (c *Cache) fromIndex(im indexImage) (*entry, error) {
	d, err := ParseDigest(im.SHA256)
	if err != nil {
		return nil, err
	}
	src, err := hex.DecodeString(im.SourceSHA256)
	if err != nil {
		return nil, fmt.Errorf("imagecache: index: source sha256 of %s: %w", im.SHA256, err)
	}
	if len(src) == 0 {
		src = nil
	}
	e := c.newEntry(Want{URL: im.URL, SHA256: d, Format: im.Format, ImageID: im.ImageID,
		Compression: im.Compression, SourceSHA256: src, Size: im.WantSize})
	e.size, e.lastUsed, e.reason, e.listed, e.added = im.Size, im.LastUsed, im.Reason, im.Listed, im.Added
	return e, nil
}
