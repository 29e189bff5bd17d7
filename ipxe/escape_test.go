package ipxe

import (
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestArgValue(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "site-a_1.x~", "site-a_1.x~"},
		{"url stays readable", "http://10.0.0.2:8080", "http://10.0.0.2:8080"},
		{"space and newline", "a b\nc", "a%20b%0Ac"},
		{"iPXE expansion", "${net0/mac}", "%24%7Bnet0/mac%7D"},
		{"comment and separators", "#x||y&&z;", "%23x%7C%7Cy%26%26z%3B"},
		{"base64 std", "ab+/=", "ab%2B/%3D"},
		{"percent itself", "100%", "100%25"},
		{"backslash continues a line", `a\`, "a%5C"},
		{"quotes", `"'`, "%22%27"},
		{"non-ascii", "é", "%C3%A9"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := argValue(tt.in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("argValue(%q) (-want +got):\n%s", tt.in, diff)
			}
			back, err := url.PathUnescape(got)
			if err != nil || back != tt.in {
				t.Fatalf("PathUnescape(%q) = %q, %v; want %q", got, back, err, tt.in)
			}
		})
	}
}

func TestCheckCmdline(t *testing.T) {
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"joined by single spaces", "  console=ttyS0,115200n8   quiet ", "console=ttyS0,115200n8 quiet", true},
		{"empty", "", "", true},
		{"newline splits into fields", "quiet\nloglevel=3", "quiet loglevel=3", true},
		{"dollar", "ip=${ip}", "", false},
		{"comment", "quiet #x", "", false},
		{"separator", "quiet || reboot", "", false},
		{"initrd set by siteboot", "initrd=foo", "", false},
		{"bc set by siteboot", "bc.mac=x", "", false},
		{"quote", `a="b c"`, "", false},
		{"non-ascii", "é", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := checkCmdline(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("checkCmdline(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestArchName(t *testing.T) {
	tests := []struct{ buildarch, platform, want string }{
		{"i386", "pcbios", "bios"},
		{"x86_64", "pcbios", "bios"},
		{"x86_64", "efi", "x86_64-efi"},
		{"arm64", "efi", "arm64-efi"},
		{"i386", "efi", "x86-efi"},
		{"riscv64", "efi", ""},
		{"", "", ""},
	}
	for _, tt := range tests {
		if got := archName(tt.buildarch, tt.platform); got != tt.want {
			t.Errorf("archName(%q, %q) = %q, want %q", tt.buildarch, tt.platform, got, tt.want)
		}
	}
}
