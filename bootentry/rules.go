package bootentry

import (
	"fmt"
	"net/url"
	"strings"
)

// Bounds of entry fields.
const (
	// MaxURLLen bounds a script URL.
	MaxURLLen = 2048
	// MaxBootFileLen is what the BOOTP file field (RFC 2131, 128 bytes)
	// holds besides its terminating NUL: a boot file URL goes there as it
	// is.
	MaxBootFileLen = 127
	// MaxBootFileNameLen bounds a boot file name: a UEFI HTTP-boot client
	// gets it as <base URL>/boot/<name> in the same field, so a name of
	// this length leaves room for a base URL of MaxBootFileLen -
	// len("/boot/") - MaxBootFileNameLen bytes (57), the longest the DHCP
	// proxy accepts.
	MaxBootFileNameLen = 64
)

// What iPXE's script parser does with a line (src/core/exec.c): it splits
// on whitespace, reads a token starting with '#' as a comment and "||",
// "&&" and ";" as command separators, then expands ${setting} inside each
// token; a trailing '\' continues the line. A URL of urlSafe bytes is
// therefore one plain token in a script, and a plain URI in a DHCP reply.

// urlSafe reports whether c may appear in a URL placed in a script or a
// boot file field: RFC 3986's unreserved and reserved characters and '%',
// minus '$' (iPXE expansion) and '#' (fragments are never needed here).
func urlSafe(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~:/?[]@!&'()*+,;=%", c) >= 0
}

// CheckScriptURL accepts an absolute http(s) URL of at most MaxURLLen bytes
// that is safe to place into an iPXE script as one token: no whitespace,
// control character, '$', '#', '\\', quote or other byte outside urlSafe,
// a host, and no credentials. It is the rule for an entry's
// ipxe_script_url and for every URL the renderer writes.
func CheckScriptURL(s string) error {
	if s == "" {
		return fmt.Errorf("empty URL")
	}
	if len(s) > MaxURLLen {
		return fmt.Errorf("URL longer than %d bytes", MaxURLLen)
	}
	for i := 0; i < len(s); i++ {
		if !urlSafe(s[i]) {
			return fmt.Errorf("URL has character %q at byte %d, which a boot script cannot hold", s[i], i)
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("URL does not parse")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URL is not an absolute http:// or https:// URL")
	}
	if u.Hostname() == "" {
		return fmt.Errorf("URL has no host")
	}
	if u.User != nil {
		return fmt.Errorf("URL carries credentials (user:password@); use a discovery token or a signed URL instead")
	}
	return nil
}

// IsURL reports whether a boot file is an http(s) URL rather than a name.
func IsURL(bootFile string) bool {
	return strings.HasPrefix(bootFile, "http://") || strings.HasPrefix(bootFile, "https://")
}

// CheckBootFile accepts an entry's boot_file: empty (the arch default), an
// http(s) URL of at most MaxBootFileLen bytes that passes CheckScriptURL
// (it goes into the BOOTP file field as it is), or a name of at most
// MaxBootFileNameLen bytes that passes CheckFileName.
func CheckBootFile(s string) error {
	switch {
	case s == "":
		return nil
	case IsURL(s) && len(s) > MaxBootFileLen:
		return fmt.Errorf("boot file URL of %d bytes; the BOOTP file field holds %d", len(s), MaxBootFileLen)
	case IsURL(s):
		return CheckScriptURL(s)
	case len(s) > MaxBootFileNameLen:
		return fmt.Errorf("boot file name of %d bytes; at most %d, so that <base URL>/boot/<name> fits the BOOTP file field", len(s), MaxBootFileNameLen)
	}
	return CheckFileName(s)
}

// CheckFileName accepts a plain relative path of letters, digits and
// ". _ - /" without empty, "." or ".." segments: safe in a URL path and in
// a TFTP request.
func CheckFileName(name string) error {
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c == '.' || c == '_' || c == '-' || c == '/' ||
			(c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			return fmt.Errorf("boot file %q has character %q; a boot file name uses letters, digits and . _ - /", name, c)
		}
	}
	if name == "" {
		return fmt.Errorf("empty boot file name")
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("boot file %q is not a plain relative file name", name)
		}
	}
	return nil
}

// CheckSanbootSHA256 accepts an empty digest (no sanboot) or a 32-byte
// SHA-256 digest.
func CheckSanbootSHA256(d []byte) error {
	if len(d) != 0 && len(d) != 32 {
		return fmt.Errorf("digest of %d bytes; a SHA-256 digest is 32", len(d))
	}
	return nil
}

// CheckSanbootHex accepts what an Entry's SanbootSHA256 holds: empty or 64
// lowercase hex digits.
func CheckSanbootHex(h string) error {
	if h == "" {
		return nil
	}
	if len(h) != 64 {
		return fmt.Errorf("sanboot digest %q is not 64 hex digits", h)
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("sanboot digest %q is not lowercase hex", h)
		}
	}
	return nil
}
