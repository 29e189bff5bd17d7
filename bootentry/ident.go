package bootentry

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
)

// NormalizeMAC parses an EUI-48 address in any common notation
// (aa:bb:cc:dd:ee:ff, AA-BB-CC-DD-EE-FF, aabb.ccdd.eeff, aabbccddeeff) and
// returns it in lowercase colon form. Multicast, broadcast and all-zero
// addresses are refused: no PXE NIC boots from one.
func NormalizeMAC(s string) (string, error) {
	s = strings.TrimSpace(s)
	var hw net.HardwareAddr
	if len(s) == 12 && isHex(s) {
		b, _ := hex.DecodeString(s)
		hw = b
	} else {
		var err error
		hw, err = net.ParseMAC(s)
		if err != nil {
			return "", fmt.Errorf("%q is not a MAC address", s)
		}
	}
	if len(hw) != 6 {
		return "", fmt.Errorf("%q is not a 6-byte (EUI-48) MAC address", s)
	}
	if err := checkUnicast(hw); err != nil {
		return "", fmt.Errorf("%q: %w", s, err)
	}
	return hw.String(), nil
}

func checkUnicast(hw net.HardwareAddr) error {
	if hw[0]&1 == 1 {
		return errors.New("multicast address, not a NIC's")
	}
	for _, b := range hw {
		if b != 0 {
			return nil
		}
	}
	return errors.New("all-zero address")
}

func isHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// NormalizeUUID parses a UUID written with or without hyphens, braces or a
// urn:uuid: prefix, and returns the lowercase 8-4-4-4-12 form.
func NormalizeUUID(s string) (string, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(strings.ToLower(t), "urn:uuid:")
	t = strings.TrimSuffix(strings.TrimPrefix(t, "{"), "}")
	h := strings.ReplaceAll(t, "-", "")
	if len(h) != 32 || !isHex(h) {
		return "", fmt.Errorf("%q is not a UUID", s)
	}
	if len(t) != 32 && (len(t) != 36 || t[8] != '-' || t[13] != '-' || t[18] != '-' || t[23] != '-') {
		return "", fmt.Errorf("%q is not a UUID (hyphens misplaced)", s)
	}
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], nil
}

// SMBIOS (DSP0134, System UUID) reserves these: all 00h means the system
// has no UUID, all FFh that none is set. Firmware and iPXE pass them on as
// they are; they identify nothing.
const (
	uuidNotPresent = "00000000-0000-0000-0000-000000000000"
	uuidNotSet     = "ffffffff-ffff-ffff-ffff-ffffffffffff"
)

// IsPlaceholderUUID reports whether a normalised UUID is one of the SMBIOS
// values that mean "no UUID". Readers treat such a UUID as none.
func IsPlaceholderUUID(u string) bool { return u == uuidNotPresent || u == uuidNotSet }

// CheckProductUUID normalises an entry's product_uuid and refuses the
// SMBIOS placeholders: an entry pinned to one could never be answered,
// because every reader treats them as no UUID at all.
func CheckProductUUID(s string) (string, error) {
	u, err := NormalizeUUID(s)
	if err != nil {
		return "", err
	}
	if IsPlaceholderUUID(u) {
		return "", fmt.Errorf("%s is the SMBIOS value for \"no UUID\"; leave product_uuid empty instead", u)
	}
	return u, nil
}
