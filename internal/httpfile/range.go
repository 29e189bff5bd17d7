package httpfile

import (
	"math"
	"strings"
)

// rangeKind is what a Range header asks of a file of a given size.
type rangeKind int

const (
	// rangeNone: no usable Range (absent, malformed, another unit, or more
	// than one range): the whole file, 200.
	rangeNone rangeKind = iota
	// rangeOne: one satisfiable range, 206.
	rangeOne
	// rangeUnsatisfiable: one well-formed range that starts at or past the
	// end (or a zero suffix), 416 with "Content-Range: bytes */size".
	rangeUnsatisfiable
)

// Range is the bytes [Start, Start+Length) of a file.
type Range struct{ Start, Length int64 }

// parseRange resolves a Range header value (RFC 9110 section 14.2) against
// size under the package's policy: malformed values and multiple ranges
// get the whole file (200), never a multipart answer. It stops reading at
// the second range, so a header listing thousands costs no more than two.
func parseRange(h string, size int64) (Range, rangeKind) {
	unit, set, ok := strings.Cut(h, "=")
	if !ok || !strings.EqualFold(unit, "bytes") {
		return Range{}, rangeNone
	}
	spec, n := "", 0
	for part := range strings.SplitSeq(set, ",") {
		if p := strings.Trim(part, " \t"); p != "" {
			if n++; n > 1 {
				return Range{}, rangeNone
			}
			spec = p
		}
	}
	if n != 1 {
		return Range{}, rangeNone
	}
	return resolveSpec(spec, size)
}

func resolveSpec(spec string, size int64) (Range, rangeKind) {
	a, b, ok := strings.Cut(spec, "-")
	if !ok {
		return Range{}, rangeNone
	}
	if a == "" { // suffix: the last b bytes
		n, ok := rangeDigits(b)
		switch {
		case !ok:
			return Range{}, rangeNone
		case n == 0 || size == 0:
			return Range{}, rangeUnsatisfiable
		}
		n = min(n, size)
		return Range{Start: size - n, Length: n}, rangeOne
	}
	first, ok := rangeDigits(a)
	if !ok {
		return Range{}, rangeNone
	}
	last := int64(math.MaxInt64)
	if b != "" {
		if last, ok = rangeDigits(b); !ok || last < first {
			return Range{}, rangeNone
		}
	}
	if first >= size {
		return Range{}, rangeUnsatisfiable
	}
	last = min(last, size-1)
	return Range{Start: first, Length: last - first + 1}, rangeOne
}

// rangeDigits parses 1*DIGIT; a value past int64 saturates, which is still
// a well-formed position past any end.
func rangeDigits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt64-int64(c-'0'))/10 {
			n = math.MaxInt64
			continue
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
