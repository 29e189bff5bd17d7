package bootentry

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestCheckScriptURL(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // substring of the error; "" accepts
	}{
		{"http", "http://10.0.0.2:8080/x.ipxe", ""},
		{"https with query", "https://a.example/s?mac=1&b=2", ""},
		{"ipv6 literal", "http://[fd00::1]:8080/x", ""},
		{"percent-encoded space", "http://a/b%20c", ""},
		{"space", "http://a/b c", "character ' '"},
		{"newline", "http://a/b\nkernel x", "character '\\n'"},
		{"dollar", "http://a/${x}", "character '$'"},
		{"fragment", "http://a/b#c", "character '#'"},
		{"backslash", `http://a/b\`, `character '\\'`},
		{"quote", `http://a/"b"`, "character '\"'"},
		{"tftp", "tftp://a/b", "absolute http"},
		{"relative", "/boot.ipxe", "absolute http"},
		{"no host", "http:///x", "no host"},
		{"credentials", "http://u:p@a/x", "credentials"},
		{"too long", "http://a/" + strings.Repeat("x", MaxURLLen), "longer than"},
		{"empty", "", "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errText(CheckScriptURL(tt.in))
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("CheckScriptURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestCheckBootFile(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // substring of the error; "" accepts
	}{
		{"empty is the arch default", "", ""},
		{"name", "efi/snponly.efi", ""},
		{"url", "http://10.9.9.9/custom.efi", ""},
		{"name of 64 bytes", strings.Repeat("a", 64), ""},
		{"name of 65 bytes", strings.Repeat("a", 65), "at most 64"},
		{"url of 127 bytes", "http://h/" + strings.Repeat("a", 118), ""},
		{"url of 128 bytes", "http://h/" + strings.Repeat("a", 119), "file field holds 127"},
		{"url with a space", "http://10.9.9.9/a b.efi", "character ' '"},
		{"url with an expansion", "http://10.9.9.9/${net0/mac}.efi", "character '$'"},
		{"url with credentials", "http://u:p@10.9.9.9/a.efi", "credentials"},
		{"name with a space", "a b.efi", "character ' '"},
		{"name with an expansion", "${x}.efi", "character '$'"},
		{"dotdot", "../etc/passwd", "plain relative"},
		{"absolute", "/etc/passwd", "plain relative"},
		{"empty segment", "a//b", "plain relative"},
		{"backslash", `a\b`, "character"},
		{"tftp url is a name and refused", "tftp://h/a", "character ':'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errText(CheckBootFile(tt.in))
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("CheckBootFile(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestCheckSanboot(t *testing.T) {
	got := []string{
		errText(CheckSanbootSHA256(nil)), errText(CheckSanbootSHA256(make([]byte, 32))),
		errText(CheckSanbootSHA256(make([]byte, 31))),
		errText(CheckSanbootHex("")), errText(CheckSanbootHex(strings.Repeat("ab", 32))),
		errText(CheckSanbootHex(strings.Repeat("AB", 32))), errText(CheckSanbootHex("0102")),
	}
	want := []string{
		"", "", "digest of 31 bytes; a SHA-256 digest is 32",
		"", "", `sanboot digest "` + strings.Repeat("AB", 32) + `" is not lowercase hex`, `sanboot digest "0102" is not 64 hex digits`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
