package images

import (
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// requireOrSkip skips a test whose environment is missing, or fails it
// when SITEBOOT_E2E=require (CI).
func requireOrSkip(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("SITEBOOT_E2E") == "require" {
		t.Fatalf("SITEBOOT_E2E=require: %s", why)
	}
	t.Skip(why)
}

// TestDebianIPXEPackage loads the real /usr/lib/ipxe of Debian's ipxe
// package, where ipxe.efi is a link to /boot/ipxe.efi.
func TestDebianIPXEPackage(t *testing.T) {
	const dir = "/usr/lib/ipxe"
	if _, err := os.Stat(filepath.Join(dir, "undionly.kpxe")); err != nil {
		requireOrSkip(t, "no /usr/lib/ipxe/undionly.kpxe: install the ipxe package")
	}
	tests := []struct {
		name string
		cfg  Config
		want map[string]string
	}{
		{"default dir, strict links", Config{}, map[string]string{"bios": "undionly.kpxe", "x86_64-efi": "snponly.efi"}},
		{"boot as link root", Config{LinkRoots: []string{"/boot"}}, map[string]string{"bios": "undionly.kpxe", "x86_64-efi": "ipxe.efi"}},
		{"boot as link root, prefer snp", Config{LinkRoots: []string{"/boot"}, PreferSNP: true}, map[string]string{"bios": "undionly.kpxe", "x86_64-efi": "snponly.efi"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := load(t, "", tc.cfg)
			if s.Dir() != dir {
				t.Fatalf("Dir() = %q, want %q", s.Dir(), dir)
			}
			if diff := cmp.Diff(tc.want, defaults(s)); diff != "" {
				t.Errorf("defaults (-want +got):\n%s", diff)
			}
			for _, f := range s.Files() {
				if got := fileDigest(t, filepath.Join(dir, filepath.FromSlash(f.Name))); got != f.SHA256 {
					t.Errorf("%s: listed digest %x, file has %x", f.Name, f.SHA256, got)
				}
			}
		})
	}
}

func fileDigest(t *testing.T, p string) [32]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}
