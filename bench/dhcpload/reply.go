package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// reply is what dhcpload reads from a server's answer.
type reply struct {
	XID         uint32
	MsgType     byte       // option 53 (2 = OFFER)
	Yiaddr      netip.Addr // "your" address: 0.0.0.0 in a proxy offer
	ServerID    netip.Addr // option 54, invalid when absent
	VendorClass string     // option 60
	CHAddr      [6]byte    // first 6 bytes of chaddr
}

const (
	bootReply     = 2
	msgOffer      = 2
	headerLen     = 236
	optionsOffset = headerLen + 4
)

var magicCookie = []byte{99, 130, 83, 99}

// isProxyOffer tells a proxyDHCP offer (no address, PXEClient) from a plain
// server's offer.
func (r reply) isProxyOffer() bool {
	return r.MsgType == msgOffer && r.Yiaddr == netip.IPv4Unspecified() &&
		bytes.HasPrefix([]byte(r.VendorClass), []byte("PXEClient"))
}

// parseReply decodes the fields dhcpload needs from a BOOTREPLY (RFC 2131
// §2, options RFC 2132). It reads only within b and rejects anything that
// is not a well-formed BOOTREPLY with a message type.
func parseReply(b []byte) (reply, error) {
	var r reply
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
	copy(r.CHAddr[:], b[28:34])
	if err := r.readOptions(b[optionsOffset:]); err != nil {
		return r, err
	}
	if r.MsgType == 0 {
		return r, errors.New("reply: no message type (option 53)")
	}
	return r, nil
}

func (r *reply) readOptions(opts []byte) error {
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

func (r *reply) setOption(code byte, v []byte) {
	switch {
	case code == 53 && len(v) == 1:
		r.MsgType = v[0]
	case code == 54 && len(v) == 4:
		r.ServerID = netip.AddrFrom4([4]byte(v))
	case code == 60:
		r.VendorClass = string(v)
	}
}
