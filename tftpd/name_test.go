package tftpd

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/siteboot/siteboot/images"
)

func TestRequestName(t *testing.T) {
	type result struct {
		Name    string
		Refused bool
	}
	tests := []struct {
		name string
		raw  string
		want result
	}{
		{"plain", "ipxe.efi", result{"ipxe.efi", false}},
		{"subdirectory", "arm64-efi/ipxe.efi", result{"arm64-efi/ipxe.efi", false}},
		{"one leading slash dropped", "/ipxe.efi", result{"ipxe.efi", false}},
		{"absolute path becomes relative", "/etc/passwd", result{"etc/passwd", false}},
		{"two leading slashes", "//etc/passwd", result{"", true}},
		{"dotdot", "../etc/passwd", result{"", true}},
		{"slash dotdot", "/../etc/passwd", result{"", true}},
		{"dotdot at the end", "arm64-efi/..", result{"", true}},
		{"dot", "./ipxe.efi", result{"", true}},
		{"backslash", `a\b`, result{"", true}},
		{"windows path", `\boot\ipxe.efi`, result{"", true}},
		{"nul", "ipxe.efi\x00", result{"", true}},
		{"empty", "", result{"", true}},
		{"only a slash", "/", result{"", true}},
		{"empty element", "arm64-efi//ipxe.efi", result{"", true}},
		{"trailing slash", "arm64-efi/", result{"", true}},
		{"escape", "ipxe\x1b[2J.efi", result{"", true}},
		{"too long", strings.Repeat("a", images.MaxNameLen+1), result{"", true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, err := requestName(tc.raw)
			if err != nil && !errors.Is(err, images.ErrInvalidName) {
				t.Errorf("error %v does not wrap images.ErrInvalidName", err)
			}
			if diff := cmp.Diff(tc.want, result{name, err != nil}); diff != "" {
				t.Errorf("requestName(%q) (-want +got):\n%s", tc.raw, diff)
			}
		})
	}
}
