package images

import (
	"log/slog"
	"strings"
)

// noBootFiles is the warning an operator whose appliance has no boot
// files gets, once per Load.
const noBootFiles = "no first-stage boot files: raw PXE firmware cannot boot from this appliance; " +
	"iPXE-native clients (QEMU, iPXE NIC ROMs) still can; " +
	"install the ipxe package (Debian/Ubuntu: apt install ipxe) or set boot_files.dir"

// pickDefaults chooses each arch's default: the first candidate present
// whose header fits the arch (EFI builds must be PE images of the arch's
// machine type).
func (s *Set) pickDefaults(preferSNP bool, heads map[string][]byte) {
	for _, arch := range Arches() {
		for _, name := range candidates(arch, preferSNP) {
			e, ok := s.files[name]
			if !ok {
				continue
			}
			if !fits(arch, heads[name]) {
				s.log.Warn("boot file not used as a default: not a build for this arch", "file", name, "arch", arch)
				continue
			}
			s.defaults[arch] = name
			e.Arches = append(e.Arches, arch)
			break
		}
	}
}

// warnNone logs, once per Load, that no boot file directory exists.
func (s *Set) warnNone(dir string) {
	tried := dir
	if tried == "" {
		tried = strings.Join(DefaultDirs(), ", ")
	}
	s.log.Warn(noBootFiles, "dir", tried)
}

// logSummary logs what Load found: the defaults at Info, or the same
// warning as warnNone when the directory holds no boot file for any arch.
func (s *Set) logSummary(configured string) {
	if len(s.defaults) == 0 {
		s.log.Warn(noBootFiles, "dir", s.dir, "files", len(s.files))
		return
	}
	attrs := []any{"dir", s.dir, "files", len(s.files), "default_dir", configured == ""}
	var missing []string
	for _, arch := range Arches() {
		if name, ok := s.defaults[arch]; ok {
			attrs = append(attrs, slog.String(arch, name))
		} else {
			missing = append(missing, arch)
		}
	}
	attrs = append(attrs, "no_default_for", strings.Join(missing, ","))
	s.log.Info("boot files loaded", attrs...)
}
