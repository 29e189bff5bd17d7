package imagecache

import (
	"fmt"
	"net/url"
	"path"
	"strings"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/imagecache/pull"
	"github.com/siteboot/siteboot/internal/redact"
)

// Compression names for Want.Compression.
const (
	CompressionNone = ""
	CompressionZstd = pull.Zstd
	CompressionGzip = pull.Gzip
)

// Want is one image the cache should hold.
type Want struct {
	// URL is the http or https origin of the image. It may carry a query
	// (a pre-signed URL); only scheme, host and path are ever logged. User
	// info in the URL is refused: credentials do not belong in a URL.
	URL string
	// SHA256 is the digest of the bytes the cache stores and serves
	// (CacheImage.sha256). It is the cache key.
	SHA256 [32]byte
	// Format is the catalog format ("iso", "raw", "qcow2", …), kept for
	// display; the cache stores bytes as they are.
	Format string
	// ImageID is the catalog image id (img_…), when known; for display.
	ImageID string
	// Compression, when set ("zstd" or "gzip"), makes the pull decompress
	// the origin's bytes and store the decompressed image, whose digest is
	// SHA256. Empty stores the origin's bytes as they are; the cache never
	// guesses from the URL (see DetectCompression).
	Compression string
	// SourceSHA256 is the optional digest of the compressed bytes the
	// origin sends; only with Compression. When absent, the zstd frame
	// checksums (when the frames carry them) and the gzip CRC-32 still
	// apply, and SHA256 is always checked.
	SourceSHA256 []byte
	// Size, when not 0, is the size of the stored image as the catalog
	// gives it: a pull whose origin announces another size, or whose data
	// (decompressed data included) grows past it, fails at once, and room
	// is made for it before a byte is written. Without it a pull of
	// unknown size is bounded only by Config.Capacity and Config.MinFree.
	Size int64
}

// FromCacheImage converts the contract's CacheImage (SiteSpec.cache_images)
// into a Want; the caller adds Compression and SourceSHA256 when it knows
// them.
func FromCacheImage(ci *sitev1.CacheImage) (Want, error) {
	d := ci.GetSha256()
	if len(d) != 32 {
		return Want{}, fmt.Errorf("imagecache: cache image %s: sha256 has %d bytes, want 32", redact.URL(ci.GetUrl()), len(d))
	}
	w := Want{URL: ci.GetUrl(), SHA256: [32]byte(d), Format: ci.GetFormat()}
	return w, w.Validate()
}

// Validate reports whether w can be pulled.
func (w Want) Validate() error {
	if w.SHA256 == ([32]byte{}) {
		return fmt.Errorf("imagecache: want %s: sha256 is required", redact.URL(w.URL))
	}
	if err := checkURL(w.URL); err != nil {
		return err
	}
	if w.Size < 0 {
		return fmt.Errorf("imagecache: want %s: size %d is negative", hexOf(w.SHA256), w.Size)
	}
	switch w.Compression {
	case CompressionNone:
		if len(w.SourceSHA256) != 0 {
			return fmt.Errorf("imagecache: want %s: a source sha256 needs a compression", hexOf(w.SHA256))
		}
	case CompressionZstd, CompressionGzip:
		if n := len(w.SourceSHA256); n != 0 && n != 32 {
			return fmt.Errorf("imagecache: want %s: source sha256 has %d bytes, want 32", hexOf(w.SHA256), n)
		}
	default:
		return fmt.Errorf("imagecache: want %s: unknown compression %q", hexOf(w.SHA256), redact.Clip(w.Compression))
	}
	return nil
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("imagecache: image url: %w", redact.URLError(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("imagecache: image url %s: scheme must be http or https", redact.URL(raw))
	}
	if u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("imagecache: image url %s: no host", redact.URL(raw))
	}
	if u.User != nil {
		return fmt.Errorf("imagecache: image url %s: user info is not allowed in an image url", redact.URL(raw))
	}
	return nil
}

// bareURL is raw as scheme://host/path: the stable, secret-free ref the
// status view reports.
func bareURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// DetectCompression guesses a compression from the URL path's suffix
// (".zst", ".zstd" → zstd; ".gz" → gzip; otherwise none). The cache never
// applies it by itself: the catalog's sha256 may be that of the compressed
// file, served as is. A caller that knows the catalog serves a compressed
// file whose digest is the raw image's may set Want.Compression from it.
func DetectCompression(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return CompressionNone
	}
	switch strings.ToLower(path.Ext(u.Path)) {
	case ".zst", ".zstd":
		return CompressionZstd
	case ".gz":
		return CompressionGzip
	}
	return CompressionNone
}
