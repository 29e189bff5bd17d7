package netlab

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Firmware selects how a VM boots.
type Firmware int

const (
	// BIOS is SeaBIOS running the virtio-net option ROM, which is iPXE.
	BIOS Firmware = iota
	// UEFI is OVMF: edk2's own PXE client (arch 7), then whatever it loads.
	UEFI
)

// String names the firmware for logs.
func (f Firmware) String() string {
	if f == UEFI {
		return "uefi"
	}
	return "bios"
}

// Firmware images from Debian's ovmf package.
const (
	OVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	OVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

const qemuBinary = "qemu-system-x86_64"

// VMConfig describes a virtual machine: by default one that boots from the
// network; Boot and Extra (drives) make it boot a disk instead.
type VMConfig struct {
	// Label names the VM's files in the lab dir. Default "vm<n>".
	Label string
	// Firmware is BIOS (default) or UEFI.
	Firmware Firmware
	// MAC is the NIC's address. Default: 52:54:00 and three random bytes.
	MAC net.HardwareAddr
	// MemoryMB is the guest RAM. Default 512.
	MemoryMB int
	// NIC is the QEMU network device. Default "virtio-net-pci".
	NIC string
	// NICROM is the NIC's option ROM: "" picks QEMU's iPXE ROM for BIOS and
	// no ROM for UEFI, so that edk2's own driver and PXE client run (with
	// QEMU's iPXE EFI ROM, OVMF boots iPXE straight away); "qemu" keeps
	// QEMU's ROM, "none" drops it, anything else is a ROM file path.
	NICROM string
	// RetryBoot, when positive, makes SeaBIOS restart the VM that long after
	// a boot fails (a PXE try whose DHCP went unanswered, a script that
	// exits), as a data-centre BIOS set to retry network boot would; zero
	// leaves a failed VM halted at "No bootable device". OVMF ignores it.
	RetryBoot time.Duration
	// Boot is QEMU's boot order: "" is "n", the network; "c" boots the
	// first disk (an installed image, its drives given in Extra), so a
	// machine that runs an OS can share the lab with the ones that PXE-boot.
	Boot string
	// Extra are further QEMU arguments (drives, a second -serial, which
	// becomes ttyS1 as the first is the Serial file).
	Extra []string
}

// VM is a QEMU guest on the lab's bridge (TCG, no display, boot from the
// network unless VMConfig.Boot says otherwise). The lab kills it at the
// end of the test.
type VM struct {
	*Process
	// MAC is the guest NIC's address.
	MAC net.HardwareAddr
	// Monitor is the QEMU human monitor's unix socket.
	Monitor string
	// Serial is the file receiving the guest's serial console.
	Serial string
}

// StartVM creates a tap on the bridge and boots a VM through it (from the
// network unless cfg.Boot says otherwise). Require NeedsVM(cfg.Firmware) first.
func (l *Lab) StartVM(cfg VMConfig) *VM {
	l.t.Helper()
	vm, err := l.LaunchVM(cfg)
	if err != nil {
		l.t.Fatalf("netlab: %v", err)
	}
	return vm
}

// LaunchVM is StartVM returning its error instead of failing the test, for
// callers outside the test's goroutine (a simulated BMC's chassis powering
// a machine on). The lab still kills the VM at the end of the test.
func (l *Lab) LaunchVM(cfg VMConfig) (*VM, error) {
	vm, args, err := l.prepareVM(&cfg)
	if err != nil {
		return nil, fmt.Errorf("vm %s: %w", cfg.Label, err)
	}
	p, err := l.startProcess(l.SwitchNS(), cfg.Label, qemuBinary, args...)
	if err != nil {
		return nil, err
	}
	l.stopAtCleanup(p)
	vm.Process = p
	return vm, nil
}

func (l *Lab) prepareVM(cfg *VMConfig) (*VM, []string, error) {
	l.mu.Lock()
	l.taps++
	n := l.taps
	l.mu.Unlock()
	vmDefaults(cfg, n)
	tap := "t" + strconv.Itoa(n)
	err := l.ipBatch(l.SwitchNS(),
		[]string{"tuntap", "add", "dev", tap, "mode", "tap"},
		[]string{"link", "set", tap, "master", bridge, "up"},
	)
	if err != nil {
		return nil, nil, err
	}
	vm := &VM{
		MAC:     cfg.MAC,
		Monitor: filepath.Join(l.dir, cfg.Label+".mon"),
		Serial:  filepath.Join(l.dir, cfg.Label+"-serial.log"),
	}
	if len(vm.Monitor) > 100 {
		return nil, nil, fmt.Errorf("monitor socket path too long: %s", vm.Monitor)
	}
	args, err := l.qemuArgs(cfg, vm, tap)
	return vm, args, err
}

func vmDefaults(cfg *VMConfig, n int) {
	if cfg.Label == "" {
		cfg.Label = "vm" + strconv.Itoa(n)
	}
	if cfg.MAC == nil {
		cfg.MAC = RandomMAC()
	}
	if cfg.MemoryMB <= 0 {
		cfg.MemoryMB = 512
	}
	if cfg.NIC == "" {
		cfg.NIC = "virtio-net-pci"
	}
}

func (l *Lab) qemuArgs(cfg *VMConfig, vm *VM, tap string) ([]string, error) {
	args := []string{
		"-name", cfg.Label,
		"-accel", "tcg",
		"-m", strconv.Itoa(cfg.MemoryMB),
		"-display", "none",
		"-serial", "file:" + vm.Serial,
		"-monitor", "unix:" + vm.Monitor + ",server=on,wait=off",
		"-netdev", "tap,id=n0,ifname=" + tap + ",script=no,downscript=no",
		"-device", cfg.NIC + ",netdev=n0,mac=" + cfg.MAC.String() + romOption(cfg),
		"-boot", bootOrder(cfg),
	}
	if cfg.Firmware == UEFI {
		vars := filepath.Join(l.dir, cfg.Label+"-vars.fd")
		if err := copyFile(OVMFVars, vars); err != nil {
			return nil, err
		}
		args = append(args,
			"-drive", "if=pflash,format=raw,readonly=on,file="+OVMFCode,
			"-drive", "if=pflash,format=raw,file="+vars)
	}
	return append(args, cfg.Extra...), nil
}

func bootOrder(cfg *VMConfig) string {
	order := cfg.Boot
	if order == "" {
		order = "n"
	}
	if cfg.RetryBoot > 0 {
		return order + ",reboot-timeout=" + strconv.FormatInt(cfg.RetryBoot.Milliseconds(), 10)
	}
	return order
}

func romOption(cfg *VMConfig) string {
	switch {
	case cfg.NICROM == "qemu" || (cfg.NICROM == "" && cfg.Firmware == BIOS):
		return ""
	case cfg.NICROM == "none" || cfg.NICROM == "":
		return ",romfile="
	default:
		return ",romfile=" + cfg.NICROM
	}
}

// RandomMAC returns a QEMU-style address (52:54:00 and three random bytes).
func RandomMAC() net.HardwareAddr {
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 0}
	_, _ = rand.Read(mac[3:])
	return mac
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	return nil
}
