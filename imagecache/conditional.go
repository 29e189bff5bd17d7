package imagecache

import "strings"

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
