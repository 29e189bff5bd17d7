package httpfile

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRange(t *testing.T) {
	type result struct {
		Start, Length int64
		Kind          rangeKind
	}
	one := func(s, l int64) result { return result{s, l, rangeOne} }
	none := result{Kind: rangeNone}
	unsat := result{Kind: rangeUnsatisfiable}
	tests := []struct {
		name, h string
		size    int64
		want    result
	}{
		{"first byte", "bytes=0-0", 1000, one(0, 1)},
		{"first block", "bytes=0-511", 1000, one(0, 512)},
		{"second block", "bytes=512-1023", 2048, one(512, 512)},
		{"last clamped", "bytes=512-1023", 1000, one(512, 488)},
		{"suffix", "bytes=-512", 1000, one(488, 512)},
		{"suffix larger than size", "bytes=-5000", 1000, one(0, 1000)},
		{"suffix zero", "bytes=-0", 1000, unsat},
		{"suffix on empty", "bytes=-1", 0, unsat},
		{"open ended", "bytes=100-", 1000, one(100, 900)},
		{"start at end", "bytes=1000-", 1000, unsat},
		{"past end", "bytes=5000-6000", 1000, unsat},
		{"huge start", "bytes=99999999999999999999999-", 1000, unsat},
		{"huge end clamps", "bytes=0-99999999999999999999999", 1000, one(0, 1000)},
		{"unit case", "Bytes=0-0", 10, one(0, 1)},
		{"spaces around spec", "bytes= 0-9 ", 10, one(0, 10)},
		{"empty list elements", "bytes=,0-9,", 10, one(0, 10)},
		{"reversed", "bytes=10-5", 1000, none},
		{"two ranges", "bytes=0-0,5-9", 1000, none},
		{"other unit", "items=0-5", 1000, none},
		{"no equals", "bytes 0-5", 1000, none},
		{"no dash", "bytes=5", 1000, none},
		{"sign", "bytes=+5-9", 1000, none},
		{"negative end", "bytes=5--9", 1000, none},
		{"space inside", "bytes=0 -9", 1000, none},
		{"space before equals", "bytes =0-9", 1000, none},
		{"empty", "", 1000, none},
		{"dash only", "bytes=-", 1000, none},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, k := parseRange(tt.h, tt.size)
			got := result{r.Start, r.Length, k}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseRange(%q, %d) (-want +got):\n%s", tt.h, tt.size, diff)
			}
		})
	}
}

func FuzzRange(f *testing.F) {
	for _, s := range []string{"bytes=0-511", "bytes=-512", "bytes=100-", "bytes=0-0,1-1", "bytes=99999999999999999999-", "x"} {
		f.Add(s, int64(4096))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			size = -size
		}
		if size < 0 {
			return
		}
		r, k := parseRange(h, size)
		switch k {
		case rangeOne:
			if r.Start < 0 || r.Length < 1 || r.Start+r.Length > size || r.Start+r.Length < r.Start {
				t.Fatalf("parseRange(%q, %d) = %+v, outside the image", h, size, r)
			}
		case rangeNone, rangeUnsatisfiable:
			if r != (Range{}) {
				t.Fatalf("parseRange(%q, %d) = %+v with kind %d", h, size, r, k)
			}
		default:
			t.Fatalf("parseRange(%q, %d): kind %d", h, size, k)
		}
	})
}
