package images

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestOpenRefusesNamesOutsideTheSet(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string][]byte{"undionly.kpxe": kpxe, "arm64-efi/ipxe.efi": arm64EFI})
	s, _ := load(t, dir, Config{})
	tests := []struct {
		name     string
		file     string
		sentinel error
		fsKind   error
	}{
		{"unknown", "ipxe.efi", ErrNotFound, fs.ErrNotExist},
		{"case differs", "UNDIONLY.KPXE", ErrNotFound, fs.ErrNotExist},
		{"directory", "arm64-efi", ErrNotFound, fs.ErrNotExist},
		{"empty", "", ErrInvalidName, fs.ErrPermission},
		{"dotdot", "../etc/passwd", ErrInvalidName, fs.ErrPermission},
		{"dotdot inside", "arm64-efi/../undionly.kpxe", ErrInvalidName, fs.ErrPermission},
		{"dot", "./undionly.kpxe", ErrInvalidName, fs.ErrPermission},
		{"absolute", "/undionly.kpxe", ErrInvalidName, fs.ErrPermission},
		{"absolute system file", "/etc/passwd", ErrInvalidName, fs.ErrPermission},
		{"backslash", `arm64-efi\ipxe.efi`, ErrInvalidName, fs.ErrPermission},
		{"nul", "undionly.kpxe\x00.efi", ErrInvalidName, fs.ErrPermission},
		{"empty element", "arm64-efi//ipxe.efi", ErrInvalidName, fs.ErrPermission},
		{"trailing slash", "arm64-efi/", ErrInvalidName, fs.ErrPermission},
		{"control character", "undionly\n.kpxe", ErrInvalidName, fs.ErrPermission},
		{"bad utf-8", "undionly\xff.kpxe", ErrInvalidName, fs.ErrPermission},
		{"too long", strings.Repeat("a", MaxNameLen+1), ErrInvalidName, fs.ErrPermission},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, _, err := s.Open(tc.file)
			if f != nil {
				f.Close()
			}
			if !errors.Is(err, tc.sentinel) || !errors.Is(err, tc.fsKind) {
				t.Errorf("Open(%q) error = %v, want %v (%v)", tc.file, err, tc.sentinel, tc.fsKind)
			}
		})
	}
}

func TestOpenServesTheHashedBytes(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string][]byte{"arm64-efi/ipxe.efi": arm64EFI})
	s, _ := load(t, dir, Config{})
	f, size, err := s.Open("arm64-efi/ipxe.efi")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(arm64EFI)) || digest(b) != s.Files()[0].SHA256 {
		t.Errorf("Open gave %d bytes (size %d) not matching the listed digest", len(b), size)
	}
}

func TestOpenRefusesChangedFiles(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, path string, mtime time.Time)
	}{
		{"appended", func(t *testing.T, p string, _ time.Time) {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Write([]byte{1})
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"rewritten same size", func(t *testing.T, p string, mtime time.Time) {
			if err := os.WriteFile(p, noise(len(kpxe), 42), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, mtime, mtime.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
		}},
		{"rewritten in place keeping size and mtime", func(t *testing.T, p string, mtime time.Time) {
			if err := os.WriteFile(p, noise(len(kpxe), 44), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced keeping size and mtime", func(t *testing.T, p string, mtime time.Time) {
			tmp := p + ".new"
			if err := os.WriteFile(tmp, noise(len(kpxe), 43), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(tmp, mtime, mtime); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, p); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed", func(t *testing.T, p string, _ time.Time) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, map[string][]byte{"undionly.kpxe": kpxe})
			s, logs := load(t, dir, Config{})
			tc.change(t, filepath.Join(dir, "undionly.kpxe"), s.Files()[0].ModTime)
			var errs []bool
			for range 2 {
				f, _, err := s.Open("undionly.kpxe")
				if f != nil {
					f.Close()
				}
				errs = append(errs, errors.Is(err, ErrChanged))
			}
			if diff := cmp.Diff([]bool{true, true}, errs); diff != "" {
				t.Errorf("ErrChanged on two opens (-want +got):\n%s", diff)
			}
			if n := len(logs.Lines("level=WARN", "boot file refused", "file=undionly.kpxe")); n != 1 {
				t.Errorf("want one warning for the changed file, got %d:\n%s", n, logs)
			}
		})
	}
}
