package bootentry

import (
	"fmt"
	"strings"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
)

// archNames are the names people (and the CLI) use for BootArch values, the same names
// DiscoveredMachine.arch uses.
var archNames = map[sitev1.BootArch]string{
	sitev1.BootArch_BOOT_ARCH_UNSPECIFIED:     "",
	sitev1.BootArch_BOOT_ARCH_BIOS:            "bios",
	sitev1.BootArch_BOOT_ARCH_X86_64_EFI:      "x86_64-efi",
	sitev1.BootArch_BOOT_ARCH_ARM64_EFI:       "arm64-efi",
	sitev1.BootArch_BOOT_ARCH_X86_64_EFI_HTTP: "x86_64-efi-http",
}

// ArchName returns the short name of a boot arch ("" for unspecified).
func ArchName(a sitev1.BootArch) string {
	if n, ok := archNames[a]; ok {
		return n
	}
	return fmt.Sprintf("arch(%d)", int32(a))
}

// ParseArch accepts a short name (bios, x86_64-efi, arm64-efi,
// x86_64-efi-http) or an enum name (BOOT_ARCH_BIOS); "" is unspecified.
func ParseArch(s string) (sitev1.BootArch, error) {
	for a, n := range archNames {
		if strings.EqualFold(s, n) {
			return a, nil
		}
	}
	if v, ok := sitev1.BootArch_value[strings.ToUpper(s)]; ok {
		return sitev1.BootArch(v), nil
	}
	return 0, fmt.Errorf("unknown arch %q (want bios, x86_64-efi, arm64-efi or x86_64-efi-http)", s)
}
