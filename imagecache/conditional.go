package imagecache

import (
	"net/http"
	"strings"
)

// etagListMatch reports whether an If-Match or If-None-Match value (RFC 9110
// section 13.1) names etag: "*", or a list of entity tags compared weakly
// (weak tags match too) or strongly. A malformed list matches nothing from
// the point it stops parsing.
func etagListMatch(list, etag string, weak bool) bool {
	s := list
	for {
		s = strings.TrimLeft(s, " \t,")
		if s == "" {
			return false
		}
		if s[0] == '*' {
			return true
		}
		isWeak := strings.HasPrefix(s, "W/")
		if isWeak {
			s = s[2:]
		}
		if s == "" || s[0] != '"' {
			return false
		}
		end := strings.IndexByte(s[1:], '"')
		if end < 0 {
			return false
		}
		tag := s[:end+2]
		s = s[end+2:]
		if tag == etag && (weak || !isWeak) {
			return true
		}
	}
}

// ifRangeHolds reports whether a Range may be honoured under If-Range
// (RFC 9110 section 13.1.5): absent, or our strong ETag exactly. A date
// never holds (no Last-Modified is sent), nor does a weak tag.
func ifRangeHolds(r *http.Request, etag string) bool {
	v, ok := r.Header["If-Range"]
	if !ok {
		return true
	}
	return len(v) == 1 && strings.TrimSpace(v[0]) == etag
}
