package httpfile

import (
	"net/http"
	"strings"
)

// Conds are the request headers that choose the answer for a file: the
// first If-Match and If-None-Match, and the Range and If-Range values with
// the number of header lines each came in. The image cache's fast path
// fills them from the request heads it parses itself.
type Conds struct {
	IfMatch, IfNoneMatch string
	Range, IfRange       string
	NRange, NIfRange     int
}

// CondsOf takes the Conds from a request's header.
func CondsOf(h http.Header) Conds {
	k := Conds{IfMatch: h.Get("If-Match"), IfNoneMatch: h.Get("If-None-Match")}
	if v := h.Values("Range"); len(v) > 0 {
		k.Range, k.NRange = v[0], len(v)
	}
	if v := h.Values("If-Range"); len(v) > 0 {
		k.IfRange, k.NIfRange = v[0], len(v)
	}
	return k
}

// Answer is the status for a GET (get) or HEAD of a file with this strong
// ETag and size, and the bytes to send with 200 or 206: If-Match, then
// If-None-Match (RFC 9110 section 13.2.2), then the Range of a GET when
// If-Range allows it, under the package's range policy.
func (k Conds) Answer(get bool, etag string, size int64) (int, Range) {
	all := Range{Length: size}
	switch {
	case k.IfMatch != "" && !etagListMatch(k.IfMatch, etag, false):
		return http.StatusPreconditionFailed, Range{}
	case k.IfNoneMatch != "" && etagListMatch(k.IfNoneMatch, etag, true):
		return http.StatusNotModified, Range{}
	case !get || k.NRange != 1 || !k.ifRangeHolds(etag):
		return http.StatusOK, all
	}
	switch rng, kind := parseRange(k.Range, size); kind {
	case rangeOne:
		return http.StatusPartialContent, rng
	case rangeUnsatisfiable:
		return http.StatusRequestedRangeNotSatisfiable, Range{}
	}
	return http.StatusOK, all
}

// ifRangeHolds reports whether a Range may be honoured under If-Range
// (RFC 9110 section 13.1.5): absent, or our strong ETag exactly. A date
// never holds (no Last-Modified is sent), nor does a weak tag.
func (k Conds) ifRangeHolds(etag string) bool {
	return k.NIfRange == 0 || k.NIfRange == 1 && strings.TrimSpace(k.IfRange) == etag
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
