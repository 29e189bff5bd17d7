package images

import (
	"errors"
	"strings"
	"testing"
)

// FuzzValidName checks that ValidName never panics and that every name it
// accepts is one no path trick can hide in.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"undionly.kpxe", "arm64-efi/ipxe.efi", "../etc/passwd", "/etc/passwd", `a\b`, "a\x00b", "a//b", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidName(name)
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("ValidName(%q) = %v, not ErrInvalidName", name, err)
			}
			return
		}
		if name == "" || strings.HasPrefix(name, "/") || strings.ContainsAny(name, "\\\x00") || len(name) > MaxNameLen {
			t.Fatalf("ValidName accepted %q", name)
		}
		for _, elem := range strings.Split(name, "/") {
			if elem == "" || elem == "." || elem == ".." {
				t.Fatalf("ValidName accepted %q with element %q", name, elem)
			}
		}
	})
}

// FuzzPEMachine checks that the PE header reader never panics on what a
// boot file directory may hold and only reports machines of "PE" images.
func FuzzPEMachine(f *testing.F) {
	f.Add(amd64EFI[:256])
	f.Add(arm64EFI[:0x86])
	f.Add([]byte("MZ"))
	f.Add(kpxe[:128])
	f.Fuzz(func(t *testing.T, head []byte) {
		m, ok := peMachine(head)
		if !ok {
			return
		}
		if !strings.HasPrefix(string(head), "MZ") || !strings.Contains(string(head), "PE\x00\x00") {
			t.Fatalf("peMachine accepted a non-PE head (machine %#x)", m)
		}
	})
}
