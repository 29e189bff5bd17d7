package dhcpproxy

import "strconv"

// Client system architecture codes (DHCP option 93, RFC 4578 §2.1 and the
// IANA "Processor Architecture Types" registry) that this server answers.
// RFC 4578 lists 7 as "EFI BC" and 9 as "EFI x86-64"; firmware in the field
// sends both for x86-64 UEFI, so both are treated alike.
const (
	ArchBIOS         uint16 = 0
	ArchX86EFI       uint16 = 6
	ArchX8664EFI     uint16 = 7
	ArchX8664EFIAlt  uint16 = 9
	ArchARM32EFI     uint16 = 10
	ArchARM64EFI     uint16 = 11
	ArchX86EFIHTTP   uint16 = 15
	ArchX8664EFIHTTP uint16 = 16
	ArchARM32EFIHTTP uint16 = 18
	ArchARM64EFIHTTP uint16 = 19
)

// ArchName returns the name people (and DiscoveredMachine.arch) use for an
// option 93 code: bios, x86-efi, x86_64-efi, arm32-efi, arm64-efi and their
// "-http" variants; any other code is "arch-<n>" and is never answered.
func ArchName(code uint16) string {
	base, http, ok := lookupArch(code)
	switch {
	case !ok:
		return "arch-" + strconv.Itoa(int(code))
	case http:
		return base + "-http"
	default:
		return base
	}
}

// lookupArch maps an option 93 code to its base (non-HTTP) arch name, the
// name BootFiles is asked with, and whether it is a UEFI HTTP-boot code.
func lookupArch(code uint16) (base string, http, ok bool) {
	switch code {
	case ArchBIOS:
		return "bios", false, true
	case ArchX86EFI:
		return "x86-efi", false, true
	case ArchX8664EFI, ArchX8664EFIAlt:
		return "x86_64-efi", false, true
	case ArchARM32EFI:
		return "arm32-efi", false, true
	case ArchARM64EFI:
		return "arm64-efi", false, true
	case ArchX86EFIHTTP:
		return "x86-efi", true, true
	case ArchX8664EFIHTTP:
		return "x86_64-efi", true, true
	case ArchARM32EFIHTTP:
		return "arm32-efi", true, true
	case ArchARM64EFIHTTP:
		return "arm64-efi", true, true
	}
	return "", false, false
}
