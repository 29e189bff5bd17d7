package imagecache

import (
	"encoding/hex"
	"fmt"

	"github.com/siteboot/siteboot/imagecache/serve"
	"github.com/siteboot/siteboot/internal/redact"
)

// PathPrefix is the URL path prefix the Handler serves: PathPrefix + the
// lower-case hex SHA-256 of an image.
const PathPrefix = serve.PathPrefix

// ErrMalformedPath is returned by ParsePath for anything but
// "/cache/<64 lower-case hex digits>".
var ErrMalformedPath = serve.ErrMalformedPath

// ParsePath parses the URL path of a cache request. Only the canonical form
// "/cache/<64 lower-case hex digits>" is accepted, so each blob has exactly
// one URL.
func ParsePath(p string) ([32]byte, error) { return serve.ParsePath(p) }

// URLPath returns the path the Handler serves digest under.
func URLPath(digest [32]byte) string { return serve.URLPath(digest) }

// ParseDigest parses a SHA-256 digest written as 64 hex digits (either case),
// as an operator types it for "image rm".
func ParseDigest(s string) ([32]byte, error) {
	var d [32]byte
	if len(s) != hex.EncodedLen(len(d)) {
		return d, fmt.Errorf("imagecache: digest %q: want 64 hex digits", redact.Clip(s))
	}
	if _, err := hex.Decode(d[:], []byte(s)); err != nil {
		return d, fmt.Errorf("imagecache: digest %q: %w", redact.Clip(s), err)
	}
	return d, nil
}

// hexOf is the lower-case hex form of a digest: blob and ingest file names,
// log fields.
func hexOf(d [32]byte) string { return hex.EncodeToString(d[:]) }
