package tftpd

import (
	"fmt"
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
		return "", fmt.Errorf("tftpd: requested name %q: %w", raw, err)
	}
	return name, nil
}
