package pxe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Reply is what the generators read from a server's answer.
type Reply struct {
	XID         uint32
	MsgType     byte       // option 53 (2 = OFFER)
	Yiaddr      netip.Addr // "your" address: 0.0.0.0 in a proxy offer
	Siaddr      netip.Addr // next server (the TFTP server of a PXE offer)
	ServerID    netip.Addr // option 54, invalid when absent
	VendorClass string     // option 60
	CHAddr      [6]byte    // first 6 bytes of chaddr
	// BootFile is option 67, or the BOOTP file field when that is absent.
	BootFile string
	// TFTPServer is option 66 (a name or address), empty when absent.
	TFTPServer string
	// Arrived is when the reply reached the client's socket (the kernel's
	// receive timestamp), zero when unknown. ParseReply leaves it; a
	// receiver that has it sets it.
	Arrived time.Time
	// PXE is option 43 of a PXEClient reply, read as PXE sub-options:
	// what firmware follows to its boot server when the offer names no
	// file. Zero for other replies, whose option 43 is vendor-defined.
	PXE PXEOptions
}

// PXEOptions are the PXE 2.1 sub-options of option 43 (Table 2-1) that
// boot server discovery needs.
type PXEOptions struct {
	// Discovery is set when any of sub-options 6 to 10 is present: the
	// offer is then a "PXE" one whose discovery control, menu and server
	// list firmware obeys (edk2's ProxyPxe10). A PXEClient proxy offer
	// without them is a "BINL" one, which edk2 asks again at port 4011.
	Discovery bool
	Control   byte         // sub-option 6, discovery control (see Ctl*)
	Servers   []BootServer // sub-option 8, boot servers by type
	Menu      []MenuItem   // sub-option 9; the first item is the default
	// Item is sub-option 71, which a boot server's ACK echoes: iPXE takes
	// only an ACK for the type it asked for. Nil when absent.
	Item *BootItem
}

// BootServer is one entry of sub-option 8: the servers of one boot type.
type BootServer struct {
	Type  uint16
	Addrs []netip.Addr
}

// MenuItem is one entry of sub-option 9.
type MenuItem struct {
	Type uint16
	Desc string
}

// PXE sub-options of option 43 (PXE 2.1 Table 2-1).
const (
	SubDiscoveryControl = 6
	SubBootServers      = 8
	SubBootMenu         = 9
	SubMenuPrompt       = 10
	SubBootItem         = 71 // PXE_BOOT_ITEM: type and layer, in a boot server request and its ACK
)

// Discovery control bits (sub-option 6).
const (
	CtlNoBroadcast = 1 << 0 // do not broadcast boot server discovery
	CtlNoMulticast = 1 << 1 // do not multicast it
	CtlServerList  = 1 << 2 // ask and accept only the servers of sub-option 8
	CtlUseFile     = 1 << 3 // boot the offer's file when it names one: no menu, no discovery
)

// ServerFor returns the first address sub-option 8 lists for boot type t.
func (p PXEOptions) ServerFor(t uint16) (netip.Addr, bool) {
	for _, s := range p.Servers {
		if s.Type == t && len(s.Addrs) > 0 {
			return s.Addrs[0], true
		}
	}
	return netip.Addr{}, false
}

// Message types and header layout (RFC 2131 §2, RFC 2132 §9.6).
const (
	bootReply     = 2
	MsgOffer      = 2
	MsgRequest    = 3
	MsgAck        = 5
	headerLen     = 236
	optionsOffset = headerLen + 4
	fileOffset    = 108
	fileLen       = 128
)

var magicCookie = []byte{99, 130, 83, 99}

// IsProxyOffer tells a proxyDHCP offer (no address, PXEClient) from a plain
// server's offer.
func (r Reply) IsProxyOffer() bool {
	return r.MsgType == MsgOffer && r.Yiaddr == netip.IPv4Unspecified() &&
		bytes.HasPrefix([]byte(r.VendorClass), []byte("PXEClient"))
}

// HasPXEOptions is iPXE's test (dhcp_has_pxeopts) of whether a proxy
// reply says where to boot from: a next server and a boot file, or a PXE
// menu. iPXE asks a proxy whose offer has neither again at port 4011,
// and ignores that request's answers until one has them.
func (r Reply) HasPXEOptions() bool {
	return (r.Siaddr.IsValid() && !r.Siaddr.IsUnspecified() && r.BootFile != "") || len(r.PXE.Menu) > 0
}

// IsHTTPProxyOffer is IsProxyOffer for UEFI HTTP boot: option 60
// HTTPClient (UEFI 2.5+ §24.7.2) instead of PXEClient.
func (r Reply) IsHTTPProxyOffer() bool {
	return r.MsgType == MsgOffer && r.Yiaddr == netip.IPv4Unspecified() &&
		bytes.HasPrefix([]byte(r.VendorClass), []byte("HTTPClient"))
}

// ParseReply decodes the fields the generators need from a BOOTREPLY (RFC
// 2131 §2, options RFC 2132). It reads only within b and rejects anything
// that is not a well-formed BOOTREPLY with a message type.
func ParseReply(b []byte) (Reply, error) {
	var r Reply
	if len(b) < optionsOffset {
		return r, fmt.Errorf("reply: %d bytes, shorter than a DHCP header", len(b))
	}
	if b[0] != bootReply {
		return r, fmt.Errorf("reply: op %d is not BOOTREPLY", b[0])
	}
	if !bytes.Equal(b[headerLen:optionsOffset], magicCookie) {
		return r, errors.New("reply: no DHCP magic cookie")
	}
	r.XID = binary.BigEndian.Uint32(b[4:8])
	r.Yiaddr = netip.AddrFrom4([4]byte(b[16:20]))
	r.Siaddr = netip.AddrFrom4([4]byte(b[20:24]))
	copy(r.CHAddr[:], b[28:34])
	file := b[fileOffset : fileOffset+fileLen]
	if i := bytes.IndexByte(file, 0); i >= 0 {
		file = file[:i]
	}
	r.BootFile = string(file)
	vendor, err := r.readOptions(b[optionsOffset:])
	if err != nil {
		return r, err
	}
	if r.MsgType == 0 {
		return r, errors.New("reply: no message type (option 53)")
	}
	// Option 43 is PXE's only in a PXEClient reply (PXE 2.1 §2.2.4), and
	// it may come before option 60, so it is read last.
	if len(vendor) > 0 && bytes.HasPrefix([]byte(r.VendorClass), []byte("PXEClient")) {
		if r.PXE, err = parsePXEOptions(vendor); err != nil {
			return r, err
		}
	}
	return r, nil
}

// readOptions applies each option and returns option 43's value, its
// instances concatenated (RFC 3396).
func (r *Reply) readOptions(opts []byte) ([]byte, error) {
	var vendor []byte
	for i := 0; i < len(opts); {
		code := opts[i]
		if code == 255 {
			return vendor, nil
		}
		if code == 0 {
			i++
			continue
		}
		if i+1 >= len(opts) || i+2+int(opts[i+1]) > len(opts) {
			return nil, fmt.Errorf("reply: option %d runs past the packet", code)
		}
		v := opts[i+2 : i+2+int(opts[i+1])]
		if code == 43 {
			vendor = append(vendor, v...)
		}
		r.setOption(code, v)
		i += 2 + int(opts[i+1])
	}
	return vendor, nil
}

// parsePXEOptions reads the PXE sub-options of option 43 (pad 0, end
// 255, else code, length, value), refusing any that runs past the option
// or is shorter than its format.
func parsePXEOptions(b []byte) (PXEOptions, error) {
	var p PXEOptions
	for i := 0; i < len(b); {
		code := b[i]
		if code == 255 {
			break
		}
		if code == 0 {
			i++
			continue
		}
		if i+1 >= len(b) || i+2+int(b[i+1]) > len(b) {
			return p, fmt.Errorf("reply: option 43 sub-option %d runs past the option", code)
		}
		v := b[i+2 : i+2+int(b[i+1])]
		i += 2 + len(v)
		var err error
		switch code {
		case SubDiscoveryControl:
			if len(v) != 1 {
				return p, fmt.Errorf("reply: option 43 sub-option 6 (discovery control) has %d bytes, want 1", len(v))
			}
			p.Control = v[0]
		case SubBootServers:
			p.Servers, err = parseBootServers(v)
		case SubBootMenu:
			p.Menu, err = parseBootMenu(v)
		case SubBootItem:
			if len(v) != 4 {
				return p, fmt.Errorf("reply: option 43 sub-option 71 (boot item) has %d bytes, want 4", len(v))
			}
			p.Item = &BootItem{Type: binary.BigEndian.Uint16(v), Layer: binary.BigEndian.Uint16(v[2:])}
		}
		if err != nil {
			return p, err
		}
		if code >= SubDiscoveryControl && code <= SubMenuPrompt {
			p.Discovery = true
		}
	}
	return p, nil
}

// parseBootServers reads sub-option 8: entries of type (2 bytes), count
// (1) and count IPv4 addresses.
func parseBootServers(v []byte) ([]BootServer, error) {
	var out []BootServer
	for i := 0; i < len(v); {
		if i+3 > len(v) || i+3+4*int(v[i+2]) > len(v) {
			return nil, fmt.Errorf("reply: option 43 sub-option 8 (boot servers): entry %d runs past the sub-option", len(out)+1)
		}
		s := BootServer{Type: binary.BigEndian.Uint16(v[i:])}
		for j := range int(v[i+2]) {
			s.Addrs = append(s.Addrs, netip.AddrFrom4([4]byte(v[i+3+4*j:])))
		}
		out = append(out, s)
		i += 3 + 4*int(v[i+2])
	}
	return out, nil
}

// parseBootMenu reads sub-option 9: entries of type (2 bytes), length (1)
// and that many bytes of description.
func parseBootMenu(v []byte) ([]MenuItem, error) {
	var out []MenuItem
	for i := 0; i < len(v); {
		if i+3 > len(v) || i+3+int(v[i+2]) > len(v) {
			return nil, fmt.Errorf("reply: option 43 sub-option 9 (boot menu): item %d runs past the sub-option", len(out)+1)
		}
		out = append(out, MenuItem{Type: binary.BigEndian.Uint16(v[i:]), Desc: string(v[i+3 : i+3+int(v[i+2])])})
		i += 3 + int(v[i+2])
	}
	return out, nil
}

func (r *Reply) setOption(code byte, v []byte) {
	switch {
	case code == 53 && len(v) == 1:
		r.MsgType = v[0]
	case code == 54 && len(v) == 4:
		r.ServerID = netip.AddrFrom4([4]byte(v))
	case code == 60:
		r.VendorClass = string(v)
	case code == 66:
		r.TFTPServer = string(bytes.TrimRight(v, "\x00"))
	case code == 67:
		// Option 67 overrides the file field (RFC 2132 §9.5); some servers
		// NUL-terminate it.
		r.BootFile = string(bytes.TrimRight(v, "\x00"))
	}
}
