package pull

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseContentRange(t *testing.T) {
	type result struct {
		First, Last, Size int64
		OK                bool
	}
	tests := []struct {
		name, in string
		want     result
	}{
		{"full", "bytes 100-199/1000", result{100, 199, 1000, true}},
		{"unknown size", "bytes 0-9/*", result{0, 9, -1, true}},
		{"last past size", "bytes 0-1000/1000", result{}},
		{"reversed", "bytes 9-0/1000", result{}},
		{"unsatisfied form", "bytes */1000", result{}},
		{"other unit", "items 0-9/10", result{}},
		{"sign", "bytes +0-9/10", result{}},
		{"overflow", "bytes 0-9/99999999999999999999", result{}},
		{"empty", "", result{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, l, s, ok := parseContentRange(tt.in)
			if diff := cmp.Diff(tt.want, result{f, l, s, ok}); diff != "" {
				t.Errorf("parseContentRange(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func FuzzContentRange(f *testing.F) {
	for _, s := range []string{"bytes 100-199/1000", "bytes 0-9/*", "bytes */10", "bytes 1-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		first, last, size, ok := parseContentRange(s)
		if ok && (first < 0 || last < first || size >= 0 && last >= size || size < -1) {
			t.Fatalf("parseContentRange(%q) = %d, %d, %d: inconsistent", s, first, last, size)
		}
	})
}
