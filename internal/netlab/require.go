package netlab

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// RequireEnv is the environment variable that turns a missing prerequisite
// from a skip into a failure when it is set to "require" (CI sets it).
const RequireEnv = "SITEBOOT_E2E"

// Needs lists what a test needs from the machine besides root, ip(8),
// unshare(1) and sh.
type Needs struct {
	// Binaries are looked up in PATH (for example "dnsmasq").
	Binaries []string
	// Files must exist (for example the OVMF firmware images).
	Files []string
	// Slow marks a test that takes tens of seconds (QEMU under TCG); it is
	// skipped under go test -short, whatever RequireEnv says.
	Slow bool
}

// NeedsVM is what a virtual machine with the given firmware needs.
func NeedsVM(fw Firmware) Needs {
	n := Needs{Binaries: []string{qemuBinary}, Files: []string{"/dev/net/tun"}, Slow: true}
	if fw == UEFI {
		n.Files = append(n.Files, OVMFCode, OVMFVars)
	}
	return n
}

// NeedsDnsmasq is what StartDnsmasq needs.
func NeedsDnsmasq() Needs { return Needs{Binaries: []string{"dnsmasq"}} }

// Require skips the test (or fails it when SITEBOOT_E2E=require) unless the
// process is root and every need is met.
func Require(t testing.TB, needs ...Needs) {
	t.Helper()
	for _, n := range needs {
		if n.Slow && testing.Short() {
			t.Skip("netlab: slow end-to-end test skipped in -short mode")
		}
	}
	if reason := missing(needs); reason != "" {
		if os.Getenv(RequireEnv) == "require" {
			t.Fatalf("netlab: %s (and %s=require)", reason, RequireEnv)
		}
		t.Skipf("netlab: %s (set %s=require to fail instead)", reason, RequireEnv)
	}
}

// missing returns why the machine cannot run the test, or "".
func missing(needs []Needs) string {
	if os.Geteuid() != 0 {
		return "needs root to create network namespaces"
	}
	bins := []string{"ip", "unshare", "sh"}
	var files []string
	for _, n := range needs {
		bins = append(bins, n.Binaries...)
		files = append(files, n.Files...)
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Sprintf("needs %s in PATH", b)
		}
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return fmt.Sprintf("needs %s", f)
		}
	}
	return ""
}
