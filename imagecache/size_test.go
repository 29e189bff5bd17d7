package imagecache

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSize(t *testing.T) {
	type result struct {
		N   int64
		Err bool
	}
	tests := []struct {
		name, in string
		want     result
	}{
		{"plain bytes", "123456", result{N: 123456}},
		{"zero", "0", result{N: 0}},
		{"binary GiB", "10GiB", result{N: 10 << 30}},
		{"binary Gi", "10Gi", result{N: 10 << 30}},
		{"decimal G", "500G", result{N: 500e9}},
		{"decimal GB", "500GB", result{N: 500e9}},
		{"fraction T", "1.5T", result{N: 1.5e12}},
		{"fraction TiB", "1.5TiB", result{N: 3 << 39}},
		{"space and lower case", " 512 mib ", result{N: 512 << 20}},
		{"bytes unit", "42B", result{N: 42}},
		{"fraction rounds down", "1.0000001K", result{N: 1000}},
		{"kilo", "4k", result{N: 4000}},
		{"peta binary", "1PiB", result{N: 1 << 50}},
		{"max int64", "9223372036854775807", result{N: 1<<63 - 1}},
		{"overflow", "9223372036854775808", result{Err: true}},
		{"overflow with unit", "8EiB", result{Err: true}},
		{"negative", "-1G", result{Err: true}},
		{"empty", "", result{Err: true}},
		{"unit only", "GiB", result{Err: true}},
		{"fraction of a byte", "1.5", result{Err: true}},
		{"unknown unit", "10 parsecs", result{Err: true}},
		{"two dots", "1.2.3G", result{Err: true}},
		{"lone dot", ".G", result{Err: true}},
		{"exponent", "1e9", result{Err: true}},
		{"too long", strings.Repeat("9", 50), result{Err: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := ParseSize(tt.in)
			got := result{N: n, Err: err != nil}
			if err != nil {
				got.N = 0
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseSize(%q) (-want +got):\n%s (err %v)", tt.in, diff, err)
			}
		})
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"10GiB", "1.5T", "0", "-1", "9223372036854775807", "1.0000001K"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d, negative", s, n)
		}
	})
}
