package images

import "encoding/binary"

// Client arch names, as docs/firmware.md rule 7 names the option 93 codes.
const (
	ArchBIOS     = "bios"       // code 0
	ArchX86EFI   = "x86-efi"    // code 6
	ArchX8664EFI = "x86_64-efi" // codes 7 and 9
	ArchARM32EFI = "arm32-efi"  // code 10
	ArchARM64EFI = "arm64-efi"  // code 11
)

// Arches lists the arch names BootFile knows, in display order.
func Arches() []string {
	return []string{ArchBIOS, ArchX8664EFI, ArchARM64EFI, ArchX86EFI, ArchARM32EFI}
}

// efiArch describes where the iPXE EFI builds of one arch are looked for.
type efiArch struct {
	build   string   // iPXE build platform: bin-<build>/ in an iPXE tree
	suffix  string   // <flavour>-<suffix>.efi, the flat naming
	bare    bool     // <flavour>.efi at the top means this arch (distro layout)
	machine []uint16 // accepted PE/COFF machine types
}

// PE/COFF machine types (the Microsoft PE format specification).
const (
	machineI386  = 0x014c
	machineARM   = 0x01c0
	machineThumb = 0x01c2
	machineARMNT = 0x01c4
	machineAMD64 = 0x8664
	machineARM64 = 0xaa64
)

func efiArchOf(arch string) (efiArch, bool) {
	switch arch {
	case ArchX8664EFI:
		return efiArch{"x86_64-efi", "x86_64", true, []uint16{machineAMD64}}, true
	case ArchX86EFI:
		return efiArch{"i386-efi", "i386", false, []uint16{machineI386}}, true
	case ArchARM64EFI:
		return efiArch{"arm64-efi", "arm64", false, []uint16{machineARM64}}, true
	case ArchARM32EFI:
		return efiArch{"arm32-efi", "arm32", false, []uint16{machineARM, machineThumb, machineARMNT}}, true
	}
	return efiArch{}, false
}

// candidates returns the names tried, in order, for arch's default boot
// file. BIOS: undionly.kpxe, then bin-i386-pcbios/undionly.kpxe. EFI: for
// each flavour (ipxe, snponly, snp; snponly and snp first when preferSNP),
// <flavour>.efi (x86_64 only: the Debian/Ubuntu layout), <build>/<flavour>.efi,
// bin-<build>/<flavour>.efi and <flavour>-<suffix>.efi, where build is
// x86_64-efi, i386-efi, arm64-efi or arm32-efi and suffix x86_64, i386,
// arm64 or arm32.
func candidates(arch string, preferSNP bool) []string {
	if arch == ArchBIOS {
		return []string{"undionly.kpxe", "bin-i386-pcbios/undionly.kpxe"}
	}
	ea, ok := efiArchOf(arch)
	if !ok {
		return nil
	}
	flavours := []string{"ipxe", "snponly", "snp"}
	if preferSNP {
		flavours = []string{"snponly", "snp", "ipxe"}
	}
	var names []string
	for _, f := range flavours {
		if ea.bare {
			names = append(names, f+".efi")
		}
		names = append(names,
			ea.build+"/"+f+".efi",
			"bin-"+ea.build+"/"+f+".efi",
			f+"-"+ea.suffix+".efi")
	}
	return names
}

// fits reports whether a file whose first bytes are head can be arch's
// boot file: any file for BIOS, a PE image of a matching machine for EFI.
func fits(arch string, head []byte) bool {
	ea, ok := efiArchOf(arch)
	if !ok {
		return arch == ArchBIOS
	}
	m, ok := peMachine(head)
	if !ok {
		return false
	}
	for _, want := range ea.machine {
		if m == want {
			return true
		}
	}
	return false
}

// peMachine returns the COFF machine field of a PE image from its first
// bytes: "MZ", the PE header offset at 0x3c, "PE\0\0", then the machine.
func peMachine(head []byte) (uint16, bool) {
	if len(head) < 0x40 || head[0] != 'M' || head[1] != 'Z' {
		return 0, false
	}
	off := uint64(binary.LittleEndian.Uint32(head[0x3c:]))
	if off+6 > uint64(len(head)) || string(head[off:off+4]) != "PE\x00\x00" {
		return 0, false
	}
	return binary.LittleEndian.Uint16(head[off+4:]), true
}
