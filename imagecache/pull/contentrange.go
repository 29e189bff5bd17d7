package pull

import (
	"strconv"
	"strings"
)

// strongETag returns a strong entity tag as sent, or "" for a weak or
// malformed one.
func strongETag(s string) string {
	s = strings.TrimSpace(s)
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' || strings.ContainsRune(s[1:len(s)-1], '"') {
		return ""
	}
	return s
}

// parseContentRange parses "bytes first-last/size" (size may be "*": -1)
// from an origin's 206.
func parseContentRange(s string) (first, last, size int64, ok bool) {
	rest, found := strings.CutPrefix(s, "bytes ")
	if !found {
		return 0, 0, 0, false
	}
	rng, sz, found := strings.Cut(rest, "/")
	a, b, found2 := strings.Cut(rng, "-")
	if !found || !found2 {
		return 0, 0, 0, false
	}
	first, err1 := parseDigits(a)
	last, err2 := parseDigits(b)
	size = -1
	var err3 error
	if sz != "*" {
		size, err3 = parseDigits(sz)
	}
	if err1 != nil || err2 != nil || err3 != nil || last < first || size >= 0 && last >= size {
		return 0, 0, 0, false
	}
	return first, last, size, true
}

// parseDigits parses a non-empty run of ASCII digits into an int64.
func parseDigits(s string) (int64, error) {
	if s == "" || len(s) > 19 {
		return 0, strconv.ErrRange
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, strconv.ErrSyntax
		}
	}
	return strconv.ParseInt(s, 10, 64)
}
