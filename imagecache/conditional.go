package imagecache

import (
	"net/http"
	"strings"
)

// conds are the request headers that choose the answer for a ready image:
// the first If-Match and If-None-Match, and the Range and If-Range values
// with the number of header lines each came in.
type conds struct {
	ifMatch, ifNoneMatch string
	rng, ifRange         string
	nRange, nIfRange     int
}

func condsOf(r *http.Request) conds {
	k := conds{ifMatch: r.Header.Get("If-Match"), ifNoneMatch: r.Header.Get("If-None-Match")}
	if v := r.Header.Values("Range"); len(v) > 0 {
		k.rng, k.nRange = v[0], len(v)
	}
	if v := r.Header.Values("If-Range"); len(v) > 0 {
		k.ifRange, k.nIfRange = v[0], len(v)
	}
	return k
}

// answer is the status for a GET (get) or HEAD of a ready image with this
// ETag and size, and the bytes to send with 200 or 206: If-Match, then
// If-None-Match (RFC 9110 section 13.2.2), then the Range of a GET when
// If-Range allows it.
func (k conds) answer(get bool, etag string, size int64) (int, byteRange) {
	all := byteRange{length: size}
	switch {
	case k.ifMatch != "" && !etagListMatch(k.ifMatch, etag, false):
		return http.StatusPreconditionFailed, byteRange{}
	case k.ifNoneMatch != "" && etagListMatch(k.ifNoneMatch, etag, true):
		return http.StatusNotModified, byteRange{}
	case !get || k.nRange != 1 || !k.ifRangeHolds(etag):
		return http.StatusOK, all
	}
	switch rng, kind := parseRange(k.rng, size); kind {
	case rangeOne:
		return http.StatusPartialContent, rng
	case rangeUnsatisfiable:
		return http.StatusRequestedRangeNotSatisfiable, byteRange{}
	}
	return http.StatusOK, all
}

// ifRangeHolds reports whether a Range may be honoured under If-Range
// (RFC 9110 section 13.1.5): absent, or our strong ETag exactly. A date
// never holds (no Last-Modified is sent), nor does a weak tag.
func (k conds) ifRangeHolds(etag string) bool {
	return k.nIfRange == 0 || k.nIfRange == 1 && strings.TrimSpace(k.ifRange) == etag
}

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
