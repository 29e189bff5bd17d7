package images

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestScanTakesOnlySafeFiles(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir, outside string) Config
		want  []string
		log   string // a substring one log line must hold
	}{
		{"symlink inside the dir is taken", func(t *testing.T, dir, _ string) Config {
			symlink(t, "qemu/pxe-virtio.rom", filepath.Join(dir, "virtio-net.rom"))
			return Config{}
		}, []string{"a.bin", "qemu/pxe-virtio.rom", "virtio-net.rom"}, ""},
		{"absolute symlink leaving the dir is skipped", func(t *testing.T, dir, outside string) Config {
			symlink(t, filepath.Join(outside, "ipxe.efi"), filepath.Join(dir, "ipxe.efi"))
			return Config{}
		}, []string{"a.bin", "qemu/pxe-virtio.rom"}, "symlink leaves the boot file dir"},
		{"relative symlink leaving the dir is skipped", func(t *testing.T, dir, outside string) Config {
			symlink(t, "../outside/ipxe.efi", filepath.Join(dir, "ipxe.efi"))
			return Config{}
		}, []string{"a.bin", "qemu/pxe-virtio.rom"}, "symlink leaves the boot file dir"},
		{"symlink into a link root is taken", func(t *testing.T, dir, outside string) Config {
			symlink(t, filepath.Join(outside, "ipxe.efi"), filepath.Join(dir, "ipxe.efi"))
			symlink(t, "/etc/passwd", filepath.Join(dir, "passwd"))
			return Config{LinkRoots: []string{outside}}
		}, []string{"a.bin", "ipxe.efi", "qemu/pxe-virtio.rom"}, "symlink leaves the boot file dir"},
		{"broken symlink is skipped", func(t *testing.T, dir, _ string) Config {
			symlink(t, "nowhere", filepath.Join(dir, "gone.efi"))
			return Config{}
		}, []string{"a.bin", "qemu/pxe-virtio.rom"}, "broken symlink"},
		{"symlink to a directory is not followed", func(t *testing.T, dir, _ string) Config {
			symlink(t, "qemu", filepath.Join(dir, "roms"))
			return Config{}
		}, []string{"a.bin", "qemu/pxe-virtio.rom"}, "non-regular"},
		{"fifo is skipped", func(t *testing.T, dir, _ string) Config {
			if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
				t.Fatal(err)
			}
			return Config{}
		}, []string{"a.bin", "qemu/pxe-virtio.rom"}, "not a regular file"},
		{"files two directories down are skipped", func(t *testing.T, dir, _ string) Config {
			writeTree(t, dir, map[string][]byte{"x/y/deep.efi": kpxe})
			return Config{}
		}, []string{"a.bin", "qemu/pxe-virtio.rom"}, "too deep"},
		{"names that could not be requested are skipped", func(t *testing.T, dir, _ string) Config {
			writeTree(t, dir, map[string][]byte{`back\slash`: kpxe, "new\nline": kpxe})
			return Config{}
		}, []string{"a.bin", "qemu/pxe-virtio.rom"}, "name not servable"},
		{"MaxFiles bounds the count", func(t *testing.T, dir, _ string) Config {
			writeTree(t, dir, map[string][]byte{"b.bin": kpxe, "c.bin": kpxe})
			return Config{MaxFiles: 2}
		}, []string{"a.bin", "b.bin"}, "too many files"},
		{"MaxFileSize bounds each file", func(t *testing.T, dir, _ string) Config {
			writeTree(t, dir, map[string][]byte{"big.iso": noise(5000, 2)})
			return Config{MaxFileSize: 4096}
		}, []string{"a.bin", "qemu/pxe-virtio.rom"}, "more than the 4096 allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir, outside := filepath.Join(base, "ipxe"), filepath.Join(base, "outside")
			writeTree(t, dir, map[string][]byte{"a.bin": kpxe, "qemu/pxe-virtio.rom": kpxe})
			writeTree(t, outside, map[string][]byte{"ipxe.efi": amd64EFI})
			cfg := tc.setup(t, dir, outside)
			s, logs := load(t, dir, cfg)
			if diff := cmp.Diff(tc.want, names(s.Files())); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			if tc.log != "" && len(logs.Lines(tc.log)) == 0 {
				t.Errorf("no log line with %q in:\n%s", tc.log, logs)
			}
		})
	}
}

func TestLinkRootFileServesTarget(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "ipxe"), filepath.Join(base, "boot")
	writeTree(t, outside, map[string][]byte{"ipxe.efi": amd64EFI})
	writeTree(t, dir, map[string][]byte{"undionly.kpxe": kpxe})
	symlink(t, filepath.Join(outside, "ipxe.efi"), filepath.Join(dir, "ipxe.efi"))
	s, _ := load(t, dir, Config{LinkRoots: []string{outside, filepath.Join(base, "missing")}})
	if got, ok := s.BootFile(ArchX8664EFI); !ok || got != "ipxe.efi" {
		t.Fatalf("BootFile(x86_64-efi) = %q, %v; want ipxe.efi", got, ok)
	}
	f, size, err := s.Open("ipxe.efi")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(amd64EFI)) || digest(b) != digest(amd64EFI) {
		t.Errorf("opened %d bytes with another digest; want the link target", size)
	}
}

func TestLoadWithoutBootFiles(t *testing.T) {
	tests := []struct {
		name    string
		dir     func(t *testing.T) string
		wantDir string // substring of the warning's dir field
	}{
		{"missing dir", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") }, "nope"},
		{"empty dir", func(t *testing.T) string { return t.TempDir() }, "dir="},
		{"dir without boot files", func(t *testing.T) string {
			d := t.TempDir()
			writeTree(t, d, map[string][]byte{"README": []byte("hi")})
			return d
		}, "files=1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, logs := load(t, tc.dir(t), Config{})
			if diff := cmp.Diff(map[string]string{}, defaults(s)); diff != "" {
				t.Errorf("defaults (-want +got):\n%s", diff)
			}
			warn := logs.Lines("level=WARN", "apt install ipxe", tc.wantDir)
			if len(warn) != 1 {
				t.Errorf("want exactly one install warning, got:\n%s", logs)
			}
			if _, _, err := s.Open("undionly.kpxe"); err == nil {
				t.Error("Open succeeded on an empty set")
			}
		})
	}
}

func TestLoadRefusesBadConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	writeTree(t, filepath.Dir(file), map[string][]byte{"f": kpxe})
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"dir is a file", Config{Dir: file}, "not a directory"},
		{"negative max files", Config{Dir: t.TempDir(), MaxFiles: -1}, "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.cfg)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("Load error = %q, want one containing %q", got, tc.want)
			}
		})
	}
}

func TestFilesIsACopy(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string][]byte{"undionly.kpxe": kpxe})
	s, _ := load(t, dir, Config{})
	fs := s.Files()
	fs[0].Arches[0] = "changed"
	if diff := cmp.Diff([]string{"bios"}, s.Files()[0].Arches, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Files shares its slices (-want +got):\n%s", diff)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
