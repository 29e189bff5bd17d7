package imagecache

import (
	"math"
	"strings"
)

// rangeKind is what a Range header asks of an image of a given size.
type rangeKind int

const (
	// rangeNone: no usable Range (absent, malformed, another unit, or more
	// than one range): the whole image, 200.
	rangeNone rangeKind = iota
	// rangeOne: one satisfiable range, 206.
	rangeOne
	// rangeUnsatisfiable: one well-formed range that starts at or past the
	// end (or a zero suffix), 416 with "Content-Range: bytes */size".
	rangeUnsatisfiable
)

// byteRange is the bytes [start, start+length) of an image.
type byteRange struct{ start, length int64 }

// parseRange resolves a Range header value (RFC 9110 section 14.2) against
// size. A server may ignore a Range it does not support or finds invalid,
// and this one does: malformed values and multiple ranges get the whole
// image (200), never a multipart answer. iPXE asks one range per request.
func parseRange(h string, size int64) (byteRange, rangeKind) {
	unit, set, ok := strings.Cut(h, "=")
	if !ok || !strings.EqualFold(unit, "bytes") {
		return byteRange{}, rangeNone
	}
	spec, n := "", 0
	for part := range strings.SplitSeq(set, ",") {
		if p := strings.Trim(part, " \t"); p != "" {
			spec, n = p, n+1
		}
	}
	if n != 1 {
		return byteRange{}, rangeNone
	}
	return resolveSpec(spec, size)
}

func resolveSpec(spec string, size int64) (byteRange, rangeKind) {
	a, b, ok := strings.Cut(spec, "-")
	if !ok {
		return byteRange{}, rangeNone
	}
	if a == "" { // suffix: the last b bytes
		n, ok := rangeDigits(b)
		switch {
		case !ok:
			return byteRange{}, rangeNone
		case n == 0 || size == 0:
			return byteRange{}, rangeUnsatisfiable
		}
		n = min(n, size)
		return byteRange{start: size - n, length: n}, rangeOne
	}
	first, ok := rangeDigits(a)
	if !ok {
		return byteRange{}, rangeNone
	}
	last := int64(math.MaxInt64)
	if b != "" {
		if last, ok = rangeDigits(b); !ok || last < first {
			return byteRange{}, rangeNone
		}
	}
	if first >= size {
		return byteRange{}, rangeUnsatisfiable
	}
	last = min(last, size-1)
	return byteRange{start: first, length: last - first + 1}, rangeOne
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
