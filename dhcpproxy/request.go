package dhcpproxy

import (
	"encoding/binary"
	"encoding/hex"
	"net"
	"strconv"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// Vendor class identifiers (option 60) of network-boot clients.
const (
	classPXE  = "PXEClient"
	classHTTP = "HTTPClient"
)

// Options this package reads or writes that dhcpv4 has no helper for.
const (
	optIPXEEncap  = 175 // iPXE's encapsulated options: its presence means iPXE
	uuidOptionLen = 17  // option 97: type 0 + 16-byte UUID (RFC 4578 §2.3)
)

// client is what a request says about the machine that sent it.
type client struct {
	mac      string // lowercase colon form
	class    string // classPXE or classHTTP
	arch     uint16
	hasArch  bool
	uuidOpt  []byte // option 97 to echo; nil when absent or malformed
	echoUUID bool
	uuid     string // product UUID, 8-4-4-4-12; "" when none
	ipxe     bool
}

// ethernetMAC returns the client's EUI-48 in lowercase colon form, or ""
// when the hardware type is not Ethernet or the address is not a unicast
// NIC address.
func ethernetMAC(d *dhcpv4.DHCPv4) string {
	hw := d.ClientHWAddr
	if d.HWType != iana.HWTypeEthernet || len(hw) != 6 || hw[0]&1 == 1 {
		return ""
	}
	if hw[0]|hw[1]|hw[2]|hw[3]|hw[4]|hw[5] == 0 {
		return ""
	}
	return hw.String()
}

// bootClass returns classPXE or classHTTP from option 60's prefix, or ""
// for a client that is not network booting.
func bootClass(vc string) string {
	switch {
	case strings.HasPrefix(vc, classPXE):
		return classPXE
	case strings.HasPrefix(vc, classHTTP):
		return classHTTP
	}
	return ""
}

// clientArch reads the first code of option 93; without option 93 it falls
// back to the "Arch:xxxxx" field of the vendor class
// ("PXEClient:Arch:00000:UNDI:002001"). A malformed option 93 gives none.
func clientArch(d *dhcpv4.DHCPv4, vc string) (uint16, bool) {
	if d.Options.Has(dhcpv4.OptionClientSystemArchitectureType) {
		v := d.Options.Get(dhcpv4.OptionClientSystemArchitectureType)
		if len(v) < 2 || len(v)%2 != 0 {
			return 0, false
		}
		return binary.BigEndian.Uint16(v), true
	}
	_, rest, ok := strings.Cut(vc, ":Arch:")
	if !ok || len(rest) < 5 || (len(rest) > 5 && rest[5] != ':') {
		return 0, false
	}
	n, err := strconv.ParseUint(rest[:5], 10, 16)
	if err != nil {
		return 0, false
	}
	return uint16(n), true
}

// clientUUID reads option 97. Absent: nothing. Empty, or 17 bytes with
// type 0: echoed as sent. Anything else is treated as no UUID. The product
// UUID is decoded from the SMBIOS byte order the firmware sends (see
// formatUUID), unless it is all zero or all 0xff (firmware placeholders).
func clientUUID(d *dhcpv4.DHCPv4) (opt []byte, echo bool, uuid string) {
	if !d.Options.Has(dhcpv4.OptionClientMachineIdentifier) {
		return nil, false, ""
	}
	v := d.Options.Get(dhcpv4.OptionClientMachineIdentifier)
	switch {
	case len(v) == 0:
		return []byte{}, true, ""
	case len(v) == uuidOptionLen && v[0] == 0:
		return v, true, formatUUID(v[1:])
	}
	return nil, false, ""
}

// formatUUID renders the 16 bytes of option 97 as the SMBIOS system UUID
// people and BMCs see (dmidecode, Redfish, QEMU's -uuid, iPXE's ${uuid}).
// Firmware sends the bytes as SMBIOS 2.6+ stores them: the first three
// fields little-endian (the EFI GUID layout). SeaBIOS's iPXE, edk2's PXE
// and EFI iPXE were all seen doing so in the e2e tests, so those fields are
// swapped back here; without it a machine's UUID from DHCP would not match
// the one its BMC reports.
func formatUUID(b []byte) string {
	allZero, allOnes := true, true
	for _, c := range b {
		allZero = allZero && c == 0
		allOnes = allOnes && c == 0xff
	}
	if allZero || allOnes {
		return ""
	}
	u := []byte{b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6]}
	u = append(u, b[8:16]...)
	h := hex.EncodeToString(u)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// isIPXE reports whether the client is iPXE: user class (option 77) "iPXE",
// raw or in RFC 3004 form, or iPXE's option 175, which some NIC builds send
// without the user class.
func isIPXE(d *dhcpv4.DHCPv4) bool {
	if d.Options.Has(optionCode(optIPXEEncap)) {
		return true
	}
	uc := d.Options.Get(dhcpv4.OptionUserClassInformation)
	if string(uc) == "iPXE" {
		return true
	}
	for len(uc) > 0 {
		n := int(uc[0])
		if n == 0 || n+1 > len(uc) {
			return false
		}
		if string(uc[1:n+1]) == "iPXE" {
			return true
		}
		uc = uc[n+1:]
	}
	return false
}

// optionCode turns a raw code into a dhcpv4.OptionCode.
func optionCode(c uint8) dhcpv4.OptionCode { return dhcpv4.GenericOptionCode(c) }

// parseClient gathers the client facts; ok is false (with a reason) when
// the packet is not from a network-boot client this server deals with.
func parseClient(d *dhcpv4.DHCPv4) (c client, reason string) {
	c.mac = ethernetMAC(d)
	if c.mac == "" {
		return c, "not-ethernet"
	}
	vc := dhcpv4.GetString(dhcpv4.OptionClassIdentifier, d.Options)
	if c.class = bootClass(vc); c.class == "" {
		return c, "not-pxe"
	}
	c.arch, c.hasArch = clientArch(d, vc)
	c.uuidOpt, c.echoUUID, c.uuid = clientUUID(d)
	c.ipxe = isIPXE(d)
	return c, ""
}

// relayIP returns the request's giaddr, or nil when it was not relayed.
func relayIP(d *dhcpv4.DHCPv4) net.IP {
	g := d.GatewayIPAddr.To4()
	if g == nil || g.IsUnspecified() {
		return nil
	}
	return g
}
