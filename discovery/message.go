package discovery

import (
	"encoding/binary"
	"fmt"
	"math"
)

// messageDomain opens every signed message; the 0x00 after it ends the
// domain string, so no purpose can be read as part of it.
const messageDomain = "bc-sig-v1"

// PurposeDiscoveryAssertion is the signing purpose of a
// SignedDiscoveryAssertion (protocol reference, SignedDiscoveryAssertion).
const PurposeDiscoveryAssertion = "discovery-assertion"

// SigningMessage returns the exact bytes a Signature covers:
//
//	"bc-sig-v1" 0x00 ‖ lp(purpose) ‖ lp(part_1) ‖ … ‖ lp(part_n)
//	lp(x) = uint32_be(len(x)) ‖ x
//
// (the lp encoding of the protocol reference's BatchApproval). It is the
// only place this encoding is written down; Sign and Verify hash its result
// with SHA-256.
func SigningMessage(purpose string, parts ...[]byte) ([]byte, error) {
	size := len(messageDomain) + 1 + 4 + len(purpose)
	if uint64(len(purpose)) > math.MaxUint32 {
		return nil, fmt.Errorf("discovery: purpose of %d bytes is too long to sign", len(purpose))
	}
	for i, p := range parts {
		if uint64(len(p)) > math.MaxUint32 {
			return nil, fmt.Errorf("discovery: part %d of %d bytes is too long to sign", i, len(p))
		}
		size += 4 + len(p)
	}
	msg := make([]byte, 0, size)
	msg = append(msg, messageDomain...)
	msg = append(msg, 0)
	msg = appendLP(msg, []byte(purpose))
	for _, p := range parts {
		msg = appendLP(msg, p)
	}
	return msg, nil
}

func appendLP(dst, x []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(x)))
	return append(dst, x...)
}
