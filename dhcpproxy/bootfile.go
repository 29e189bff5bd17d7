package dhcpproxy

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// maxFileLen is what the BOOTP file field holds with its terminating NUL.
const maxFileLen = 127

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
func (s *Server) bootFile(c *client, entryFile string, serverIP net.IP) (string, error) {
	if c.ipxe {
		return checkLen(s.httpBase(serverIP) + "/boot.ipxe")
	}
	isURL := strings.HasPrefix(entryFile, "http://") || strings.HasPrefix(entryFile, "https://")
	if c.class == classHTTP && isURL {
		return checkLen(entryFile)
	}
	name := entryFile
	if name == "" || isURL {
		base, _, _ := lookupArch(c.arch)
		var ok bool
		if name, ok = s.cfg.BootFiles.BootFile(base); !ok {
			return "", fmt.Errorf("no boot file for arch %s", base)
		}
	}
	if err := checkFileName(name); err != nil {
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

// checkFileName accepts a plain relative path of letters, digits and
// ". _ - /" without empty, "." or ".." segments: safe in a URL path and in
// a TFTP request.
func checkFileName(name string) error {
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c == '.' || c == '_' || c == '-' || c == '/' ||
			(c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			return fmt.Errorf("boot file %q has a character outside [A-Za-z0-9._/-]", name)
		}
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("boot file %q is not a plain relative path", name)
		}
	}
	return nil
}
