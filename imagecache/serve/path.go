package serve

import (
	"encoding/hex"
	"errors"
	"strings"
)

// PathPrefix is the URL path prefix the Handler serves: PathPrefix + the
// lower-case hex SHA-256 of an image.
const PathPrefix = "/cache/"

// ErrMalformedPath is returned by ParsePath for anything but
// "/cache/<64 lower-case hex digits>".
var ErrMalformedPath = errors.New("imagecache: malformed cache path")

// ParsePath parses the URL path of a cache request. Only the canonical form
// "/cache/<64 lower-case hex digits>" is accepted, so each blob has exactly
// one URL.
func ParsePath(p string) ([32]byte, error) {
	var d [32]byte
	h, ok := strings.CutPrefix(p, PathPrefix)
	if !ok || len(h) != 64 {
		return d, ErrMalformedPath
	}
	for i := 0; i < len(h); i++ {
		if !isLowerHex(h[i]) {
			return d, ErrMalformedPath
		}
	}
	if _, err := hex.Decode(d[:], []byte(h)); err != nil {
		return d, ErrMalformedPath
	}
	return d, nil
}

// URLPath returns the path the Handler serves digest under.
func URLPath(digest [32]byte) string {
	return PathPrefix + hex.EncodeToString(digest[:])
}

func isLowerHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
}
