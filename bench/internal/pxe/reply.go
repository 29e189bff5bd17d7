package pxe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
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
}

// Message types and header layout (RFC 2131 §2, RFC 2132 §9.6).
const (
	bootReply     = 2
	MsgOffer      = 2
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
	if err := r.readOptions(b[optionsOffset:]); err != nil {
		return r, err
	}
	if r.MsgType == 0 {
		return r, errors.New("reply: no message type (option 53)")
	}
	return r, nil
}

func (r *Reply) readOptions(opts []byte) error {
	for i := 0; i < len(opts); {
		code := opts[i]
		if code == 255 {
			return nil
		}
		if code == 0 {
			i++
			continue
		}
		if i+1 >= len(opts) || i+2+int(opts[i+1]) > len(opts) {
			return fmt.Errorf("reply: option %d runs past the packet", code)
		}
		r.setOption(code, opts[i+2:i+2+int(opts[i+1])])
		i += 2 + int(opts[i+1])
	}
	return nil
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
