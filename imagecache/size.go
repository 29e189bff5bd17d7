package imagecache

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// sizeUnits maps a lower-cased unit to its multiplier. Units with an "i" are
// binary (KiB = 1024); the others are decimal (KB = 1000), as in SI and
// Kubernetes quantities. The trailing "b" is optional.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "ki": 1 << 10, "kib": 1 << 10,
	"m": 1e6, "mb": 1e6, "mi": 1 << 20, "mib": 1 << 20,
	"g": 1e9, "gb": 1e9, "gi": 1 << 30, "gib": 1 << 30,
	"t": 1e12, "tb": 1e12, "ti": 1 << 40, "tib": 1 << 40,
	"p": 1e15, "pb": 1e15, "pi": 1 << 50, "pib": 1 << 50,
}

// errSize is wrapped by every ParseSize error.
var errSize = errors.New("imagecache: invalid size")

// ParseSize parses a byte count with an optional unit: "123456", "500G"
// (decimal, 500×10⁹), "10GiB" (binary, 10×2³⁰), "1.5T", "512 MiB". Units
// are case-insensitive and the "B" is optional. A fraction is allowed with a
// unit and the result is rounded down to whole bytes; negative values and
// values above the int64 range are refused.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("%w %q: unknown unit %q", errSize, s, t[i:])
	}
	if num == "" || num == "." || strings.Count(num, ".") > 1 {
		return 0, fmt.Errorf("%w %q: want a number with an optional unit such as GiB or G", errSize, s)
	}
	if len(num) > 40 {
		return 0, fmt.Errorf("%w %q: too long", errSize, s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%w %q", errSize, s)
	}
	if !r.IsInt() && mult == 1 {
		return 0, fmt.Errorf("%w %q: a fraction of a byte", errSize, s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	n := new(big.Int).Quo(r.Num(), r.Denom())
	if !n.IsInt64() {
		return 0, fmt.Errorf("%w %q: larger than %d bytes", errSize, s, int64(1<<63-1))
	}
	return n.Int64(), nil
}
