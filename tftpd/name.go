package tftpd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/siteboot/siteboot/images"
)

// requestName turns the file name of a read request into the name looked
// up in the set. PXE ROMs and some boot loaders send "/ipxe.efi" where
// they mean "ipxe.efi" (dnsmasq resolves such names relative to its TFTP
// root), so exactly one leading "/" is dropped. What remains must be a
// plain relative name (images.ValidName): "..", a second leading "/",
// backslashes, NUL and other control characters, empty elements and names
// over images.MaxNameLen bytes are refused.
func requestName(raw string) (string, error) {
	name := strings.TrimPrefix(raw, "/")
	if err := images.ValidName(name); err != nil {
		return "", fmt.Errorf("tftpd: requested name %q: %w", logName(raw), err)
	}
	return name, nil
}

// logNameMax is the most of a requested name a log line or a log
// limiter's key holds: a request may carry a name of up to a kilobyte,
// and every line about it would otherwise repeat it. No name the server
// serves is longer (images.MaxNameLen).
const logNameMax = images.MaxNameLen

// logName is name for a log line: cut after logNameMax bytes, with its
// length said.
func logName(name string) string {
	if len(name) <= logNameMax {
		return name
	}
	return name[:logNameMax] + "…(" + strconv.Itoa(len(name)) + " bytes)"
}
