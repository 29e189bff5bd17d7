package imagecache

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePath(t *testing.T) {
	d := digestOf([]byte("x"))
	h := hexOf(d)
	tests := []struct {
		name, path string
		want       [32]byte
		ok         bool
	}{
		{"canonical", "/cache/" + h, d, true},
		{"upper case", "/cache/" + strings.ToUpper(h), [32]byte{}, false},
		{"trailing slash", "/cache/" + h + "/", [32]byte{}, false},
		{"short", "/cache/" + h[:63], [32]byte{}, false},
		{"long", "/cache/" + h + "0", [32]byte{}, false},
		{"no prefix", "/" + h, [32]byte{}, false},
		{"traversal", "/cache/../" + h[:61], [32]byte{}, false},
		{"not hex", "/cache/" + strings.Repeat("g", 64), [32]byte{}, false},
		{"empty", "", [32]byte{}, false},
		{"prefix only", "/cache/", [32]byte{}, false},
		{"sha256 prefix", "/cache/sha256:" + h[:57], [32]byte{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePath(tt.path)
			if diff := cmp.Diff(tt.ok, err == nil); diff != "" {
				t.Fatalf("ParsePath(%q) error %v (-want ok +got ok):\n%s", tt.path, err, diff)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParsePath(%q) (-want +got):\n%s", tt.path, diff)
			}
		})
	}
}

func TestParseDigest(t *testing.T) {
	d := digestOf([]byte("y"))
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"lower", hexOf(d), true},
		{"upper", strings.ToUpper(hexOf(d)), true},
		{"short", hexOf(d)[:10], false},
		{"not hex", strings.Repeat("z", 64), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDigest(tt.in)
			if diff := cmp.Diff(tt.ok, err == nil); diff != "" {
				t.Fatalf("ParseDigest(%q) error %v:\n%s", tt.in, err, diff)
			}
			if tt.ok && got != d {
				t.Errorf("ParseDigest(%q) = %x, want %x", tt.in, got, d)
			}
		})
	}
}

func FuzzPath(f *testing.F) {
	f.Add("/cache/" + hexOf(digestOf([]byte("x"))))
	f.Add("/cache/../etc/passwd")
	f.Add("/cache/" + strings.Repeat("A", 64))
	f.Fuzz(func(t *testing.T, p string) {
		d, err := ParsePath(p)
		if err != nil {
			return
		}
		if URLPath(d) != p {
			t.Fatalf("ParsePath(%q) accepted a non-canonical path (canonical %q)", p, URLPath(d))
		}
	})
}
