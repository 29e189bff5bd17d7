package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// contentRange is a parsed "bytes first-last/size" (RFC 9110 section
// 14.4) of a 206 answer to a single range.
type contentRange struct {
	First, Last, Size int64
}

var errContentRange = errors.New("malformed Content-Range")

// parseContentRange parses the Content-Range of a single-range 206. The
// complete length must be given (not "*"), and first <= last < size.
func parseContentRange(s string) (contentRange, error) {
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return contentRange{}, fmt.Errorf("%w %q: no \"bytes \" unit", errContentRange, clip(s))
	}
	rng, size, ok := strings.Cut(rest, "/")
	first, last, ok2 := strings.Cut(rng, "-")
	if !ok || !ok2 {
		return contentRange{}, fmt.Errorf("%w %q: want first-last/size", errContentRange, clip(s))
	}
	var cr contentRange
	for _, f := range []struct {
		dst *int64
		src string
	}{{&cr.First, first}, {&cr.Last, last}, {&cr.Size, size}} {
		v, err := digits(f.src)
		if err != nil {
			return contentRange{}, fmt.Errorf("%w %q: %v", errContentRange, clip(s), err)
		}
		*f.dst = v
	}
	if cr.First > cr.Last || cr.Last >= cr.Size {
		return contentRange{}, fmt.Errorf("%w %q: range outside the size", errContentRange, clip(s))
	}
	return cr, nil
}

// digits parses a non-empty run of ASCII digits that fits an int64.
func digits(s string) (int64, error) {
	if s == "" || len(s) > 18 {
		return 0, fmt.Errorf("%q: want 1 to 18 digits", clip(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q: not a number", clip(s))
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// clip shortens what a server sent before it goes into an error message.
func clip(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
