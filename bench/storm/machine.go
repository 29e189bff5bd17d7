package main

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
)

// Client architectures (RFC 4578 §2.1, IANA processor architecture types).
const (
	archBIOS     = 0
	archEFIx64   = 7
	archHTTPx64  = 16 // x86-64 UEFI HTTP boot
	undiBIOS     = "PXEClient:Arch:00000:UNDI:002001"
	undiEFI      = "PXEClient:Arch:00007:UNDI:003016"
	undiHTTPBoot = "HTTPClient:Arch:00016:UNDI:003001"
	// iPXE announces itself with PXEClient and its own UNDI version; the
	// user class is what tells it from firmware.
	ipxeClassBIOS = "PXEClient:Arch:00000:UNDI:002001"
	ipxeClassEFI  = "PXEClient:Arch:00007:UNDI:003010"
)

// machine is one simulated machine's identity.
type machine struct {
	Index    int
	MAC      net.HardwareAddr
	UUID     [16]byte // canonical (RFC 4122) byte order
	BIOS     bool
	HTTPBoot bool       // UEFI HTTP boot: the first stage by HTTP
	Src      netip.Addr // source address for TFTP and HTTP; invalid: the kernel's choice
}

// newMachine derives machine i's UUID from seed, so a run can be repeated.
func newMachine(i int, mac net.HardwareAddr, bios, httpBoot bool, seed uint64, src netip.Addr) machine {
	m := machine{Index: i, MAC: mac, BIOS: bios, HTTPBoot: httpBoot && !bios, Src: src}
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	for j := 0; j < 16; j += 8 {
		v := r.Uint64()
		for k := range 8 {
			m.UUID[j+k] = byte(v >> (8 * k))
		}
	}
	m.UUID[6] = m.UUID[6]&0x0f | 0x40 // version 4
	m.UUID[8] = m.UUID[8]&0x3f | 0x80 // RFC 4122 variant
	return m
}

// uuidString is the UUID as iPXE's ${uuid} and dmidecode print it.
func (m machine) uuidString() string {
	h := hex.EncodeToString(m.UUID[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// uuidWire is option 97's 16 bytes: SMBIOS 2.6+ byte order, the first
// three fields little-endian, which is what firmware and iPXE send.
func (m machine) uuidWire() []byte {
	u := m.UUID
	return []byte{u[3], u[2], u[1], u[0], u[5], u[4], u[7], u[6],
		u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]}
}

// arch is option 93 of the firmware's DISCOVER.
func (m machine) arch() uint16 {
	switch {
	case m.BIOS:
		return archBIOS
	case m.HTTPBoot:
		return archHTTPx64
	}
	return archEFIx64
}

func (m machine) firmwareClass() string {
	switch {
	case m.BIOS:
		return undiBIOS
	case m.HTTPBoot:
		return undiHTTPBoot
	}
	return undiEFI
}

// ipxeArch and ipxeClass are what the iPXE the first stage started sends:
// x86-64 EFI iPXE says arch 7 whether it came by TFTP or HTTP.
func (m machine) ipxeArch() uint16 {
	if m.BIOS {
		return archBIOS
	}
	return archEFIx64
}

func (m machine) ipxeClass() string {
	if m.BIOS {
		return ipxeClassBIOS
	}
	return ipxeClassEFI
}

// kind names the machine's boot path in reports.
func (m machine) kind() string {
	switch {
	case m.BIOS:
		return "bios"
	case m.HTTPBoot:
		return "uefi-http"
	}
	return "uefi"
}

// settings are the iPXE settings a script can read on this machine, with
// the values a BIOS (undionly.kpxe: i386, pcbios) or x86-64 EFI iPXE
// (ipxe.efi: x86_64, efi) on a QEMU-like machine has.
func (m machine) settings() map[string]string {
	s := map[string]string{
		"mac":          m.MAC.String(),
		"uuid":         m.uuidString(),
		"manufacturer": "QEMU",
		"product":      "Standard PC (storm)",
		"serial":       fmt.Sprintf("STORM-%05d", m.Index),
		"asset":        "",
		"buildarch":    "x86_64",
		"platform":     "efi",
		"busid":        "",
	}
	if m.BIOS {
		s["buildarch"], s["platform"] = "i386", "pcbios"
	}
	if m.Src.IsValid() {
		s["ip"] = m.Src.String()
	}
	return s
}
