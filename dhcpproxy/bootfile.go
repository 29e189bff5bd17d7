package dhcpproxy

import (
	"fmt"
	"net"
	"strconv"

	"github.com/siteboot/siteboot/bootentry"
)

// maxFileLen is what the BOOTP file field holds with its terminating NUL.
const maxFileLen = bootentry.MaxBootFileLen

// httpBase is the base URL of siteboot's HTTP server as this client should
// reach it.
func (s *Server) httpBase(serverIP net.IP) string {
	if s.cfg.HTTPAdvertise != "" {
		return s.cfg.HTTPAdvertise
	}
	if s.cfg.HTTPPort == 80 {
		return "http://" + serverIP.String()
	}
	return "http://" + serverIP.String() + ":" + strconv.Itoa(s.cfg.HTTPPort)
}

// bootFile chooses what the client should fetch:
//   - iPXE gets the bootstrap script URL (never a first stage again, so the
//     chainload cannot loop);
//   - a UEFI HTTP-boot client gets an http(s) URL: the entry's boot_file if
//     it is a URL, else <base>/boot/<entry boot_file or the arch default>;
//   - a raw PXE client gets a TFTP name: the entry's boot_file unless it is
//     a URL, else the arch default.
//
// Whatever goes into the reply passes the entry rules of package bootentry
// (the ones the admin API checked when the entry was stored).
func (s *Server) bootFile(c *client, entryFile string, serverIP net.IP) (string, error) {
	if c.ipxe {
		return checkLen(s.httpBase(serverIP) + "/boot.ipxe")
	}
	isURL := bootentry.IsURL(entryFile)
	if c.class == classHTTP && isURL {
		if err := bootentry.CheckBootFile(entryFile); err != nil {
			return "", err
		}
		return entryFile, nil
	}
	name := entryFile
	if name == "" || isURL {
		base, _, _ := lookupArch(c.arch)
		var ok bool
		if name, ok = s.cfg.BootFiles.BootFile(base); !ok {
			return "", fmt.Errorf("no boot file for arch %s", base)
		}
	}
	if err := bootentry.CheckFileName(name); err != nil {
		return "", err
	}
	if c.class == classHTTP {
		return checkLen(s.httpBase(serverIP) + "/boot/" + name)
	}
	return checkLen(name)
}

func checkLen(f string) (string, error) {
	if len(f) > maxFileLen {
		return "", fmt.Errorf("boot file %q is longer than the %d bytes of the file field", f, maxFileLen)
	}
	return f, nil
}
