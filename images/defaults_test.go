package images

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestBootFileDefaults(t *testing.T) {
	debian := map[string][]byte{"undionly.kpxe": kpxe, "ipxe.efi": amd64EFI, "snponly.efi": amd64EFI}
	tests := []struct {
		name      string
		files     map[string][]byte
		preferSNP bool
		want      map[string]string
	}{
		{"debian layout", debian, false,
			map[string]string{"bios": "undionly.kpxe", "x86_64-efi": "ipxe.efi"}},
		{"debian layout prefer snp", debian, true,
			map[string]string{"bios": "undionly.kpxe", "x86_64-efi": "snponly.efi"}},
		{"only snponly falls back", map[string][]byte{"snponly.efi": amd64EFI}, false,
			map[string]string{"x86_64-efi": "snponly.efi"}},
		{"only ipxe.efi with prefer snp falls back", map[string][]byte{"ipxe.efi": amd64EFI}, true,
			map[string]string{"x86_64-efi": "ipxe.efi"}},
		{"arm64 build dir", map[string][]byte{"arm64-efi/ipxe.efi": arm64EFI, "arm64-efi/snponly.efi": arm64EFI}, false,
			map[string]string{"arm64-efi": "arm64-efi/ipxe.efi"}},
		{"arm64 flat names prefer snp", map[string][]byte{"ipxe-arm64.efi": arm64EFI, "snp-arm64.efi": arm64EFI}, true,
			map[string]string{"arm64-efi": "snp-arm64.efi"}},
		{"ipxe build tree", map[string][]byte{
			"bin-i386-pcbios/undionly.kpxe": kpxe,
			"bin-x86_64-efi/snponly.efi":    amd64EFI,
			"bin-arm64-efi/snp.efi":         arm64EFI,
			"bin-i386-efi/ipxe.efi":         i386EFI,
			"bin-arm32-efi/ipxe.efi":        thumbEFI,
		}, false, map[string]string{
			"bios": "bin-i386-pcbios/undionly.kpxe", "x86_64-efi": "bin-x86_64-efi/snponly.efi",
			"arm64-efi": "bin-arm64-efi/snp.efi", "x86-efi": "bin-i386-efi/ipxe.efi", "arm32-efi": "bin-arm32-efi/ipxe.efi",
		}},
		{"top-level ipxe.efi of the wrong machine is passed over", map[string][]byte{"ipxe.efi": arm64EFI, "snponly.efi": amd64EFI}, false,
			map[string]string{"x86_64-efi": "snponly.efi"}},
		{"arm64 build in the x86_64 slot is not taken", map[string][]byte{"x86_64-efi/ipxe.efi": arm64EFI}, false,
			map[string]string{}},
		{"not a PE image", map[string][]byte{"ipxe.efi": noise(5000, 9)}, false,
			map[string]string{}},
		{"other files only", map[string][]byte{"ipxe.iso": noise(2048, 3), "undionly.kkpxe": kpxe}, false,
			map[string]string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, tc.files)
			s, _ := load(t, dir, Config{PreferSNP: tc.preferSNP})
			if diff := cmp.Diff(tc.want, defaults(s)); diff != "" {
				t.Errorf("defaults (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFilesListsDigestsAndArches(t *testing.T) {
	dir := t.TempDir()
	iso := noise(20000, 7)
	writeTree(t, dir, map[string][]byte{
		"undionly.kpxe":      kpxe,
		"ipxe.efi":           amd64EFI,
		"snponly.efi":        amd64EFI,
		"ipxe.iso":           iso,
		"arm64-efi/ipxe.efi": arm64EFI,
		"empty":              {},
	})
	s, logs := load(t, dir, Config{})
	want := []File{
		{Name: "arm64-efi/ipxe.efi", Arches: []string{"arm64-efi"}, Size: int64(len(arm64EFI)), SHA256: digest(arm64EFI)},
		{Name: "empty", Size: 0, SHA256: digest(nil)},
		{Name: "ipxe.efi", Arches: []string{"x86_64-efi"}, Size: int64(len(amd64EFI)), SHA256: digest(amd64EFI)},
		{Name: "ipxe.iso", Size: int64(len(iso)), SHA256: digest(iso)},
		{Name: "snponly.efi", Size: int64(len(amd64EFI)), SHA256: digest(amd64EFI)},
		{Name: "undionly.kpxe", Arches: []string{"bios"}, Size: int64(len(kpxe)), SHA256: digest(kpxe)},
	}
	if diff := cmp.Diff(want, s.Files(), cmpopts.IgnoreFields(File{}, "ModTime"), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Files (-want +got):\n%s", diff)
	}
	got, ok := s.Lookup("ipxe.efi")
	if !ok || got.SHA256 != digest(amd64EFI) {
		t.Errorf("Lookup(ipxe.efi) = %+v, %v; want the amd64 build", got, ok)
	}
	if _, ok := s.Lookup("nope"); ok {
		t.Error("Lookup(nope) found a file")
	}
	if s.Dir() != dir {
		t.Errorf("Dir() = %q, want %q", s.Dir(), dir)
	}
	if l := logs.Lines("boot files loaded", "bios=undionly.kpxe", "x86_64-efi=ipxe.efi", "arm64-efi=arm64-efi/ipxe.efi"); len(l) != 1 {
		t.Errorf("want one summary line naming the defaults, got %q", logs.String())
	}
}
