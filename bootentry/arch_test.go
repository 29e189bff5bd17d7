package bootentry

import (
	"strings"
	"testing"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
)

func TestParseArch(t *testing.T) {
	for in, want := range map[string]sitev1.BootArch{
		"": 0, "bios": 1, "X86_64-EFI": 2, "arm64-efi": 3, "x86_64-efi-http": 4, "BOOT_ARCH_BIOS": 1, "boot_arch_arm64_efi": 3,
	} {
		if got, err := ParseArch(in); err != nil || got != want {
			t.Errorf("ParseArch(%q) = %v, %v; want %v", in, got, err, want)
		}
		if in != "" && !strings.HasPrefix(in, "BOOT") && !strings.HasPrefix(in, "boot") && !strings.EqualFold(ArchName(want), in) {
			t.Errorf("ArchName(%v) = %q, want %q", want, ArchName(want), in)
		}
	}
	if _, err := ParseArch("sparc"); err == nil {
		t.Error("ParseArch(sparc) succeeded")
	}
}
