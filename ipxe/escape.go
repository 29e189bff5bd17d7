package ipxe

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/siteboot/siteboot/bootentry"
)

// What iPXE's script parser does with a line (src/core/exec.c): it splits on
// whitespace, treats a token starting with '#' as the start of a comment and
// the tokens "||", "&&" and ";" as command separators, then expands
// ${setting} inside each token; a trailing '\' continues the line. So a
// value is safe in a script when it has no whitespace or control
// character, no '$' and no '\', and does not start a token with '#'. URLs
// follow bootentry.CheckScriptURL, the rule entries are stored under.

// checkBaseURL accepts this appliance's base URL: a safe http(s) URL with
// no query, fragment or credentials. It returns it without a trailing '/'.
func checkBaseURL(s string) (string, error) {
	if err := bootentry.CheckScriptURL(s); err != nil {
		return "", err
	}
	u, _ := url.Parse(s)
	if u.RawQuery != "" || u.ForceQuery {
		return "", fmt.Errorf("base URL %q has a query", s)
	}
	return strings.TrimRight(s, "/"), nil
}

// argSafe are the bytes a bc.* value keeps as they are; every other byte is
// percent-encoded (%XX, upper-case hex).
func argSafe(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~:/@,", c) >= 0
}

// argValue percent-encodes a kernel parameter value: the result is one
// token of argSafe bytes and '%'. Decode with url.PathUnescape.
func argValue(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if argSafe(c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// checkCmdline accepts the ramdisk profile's fixed kernel parameters and
// returns them joined by single spaces. Parameters are printable ASCII
// without '$', '\\' or '"'; none may start with '#', be an iPXE separator,
// or set initrd= or bc.* (the renderer adds those).
func checkCmdline(s string) (string, error) {
	fields := strings.Fields(s)
	for _, f := range fields {
		for i := 0; i < len(f); i++ {
			if c := f[i]; c < 0x21 || c > 0x7e || c == '$' || c == '\\' || c == '"' {
				return "", fmt.Errorf("cmdline parameter %q has character %q", f, c)
			}
		}
		switch {
		case f[0] == '#' || f == "||" || f == "&&" || f == ";":
			return "", fmt.Errorf("cmdline parameter %q would be read by iPXE as a comment or separator", f)
		case strings.HasPrefix(f, "initrd=") || strings.HasPrefix(f, "bc."):
			return "", fmt.Errorf("cmdline parameter %q is set by siteboot itself", f)
		}
	}
	return strings.Join(fields, " "), nil
}
