package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCLIAgainstRealServer(t *testing.T) {
	a := startAppliance(t, testConfig(t))
	sock := a.cfg.Admin.Socket

	out := mustCLI(t, sock, "entry", "add", "--node-id", "node-17", "--mac", "52-54-00-AB-CD-01", "--mac", "5254.00ab.cd02",
		"--uuid", "4C4C4544-0047-3510-8052-B4C04F4E3832", "--arch", "x86_64-efi", "--workflow-id", "wf-1", "--ttl", "2h")
	for _, want := range []string{"NODE", "52:54:00:ab:cd:01", "52:54:00:ab:cd:02", "x86_64-efi", "wf-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("entry add table lacks %q:\n%s", want, out)
		}
	}
	got := listJSON(t, sock)
	if len(got.Entries) != 2 {
		t.Fatalf("entry ls -o json: %d entries, want 2: %+v", len(got.Entries), got)
	}
	e := got.Entries[0]
	if e.NodeID != "node-17" || e.Entry.Mac != "52:54:00:ab:cd:01" || e.Entry.ProductUUID != "4c4c4544-0047-3510-8052-b4c04f4e3832" ||
		e.Entry.Arch != "BOOT_ARCH_X86_64_EFI" || e.Entry.WorkflowID != "wf-1" || !e.Live {
		t.Fatalf("entry 0 = %+v", e)
	}
	notAfter, err := time.Parse(time.RFC3339Nano, e.Entry.NotAfter)
	if err != nil || notAfter.Before(time.Now().Add(110*time.Minute)) || notAfter.After(time.Now().Add(2*time.Hour)) {
		t.Fatalf("not_after = %q (%v); want about now+2h", e.Entry.NotAfter, err)
	}

	status := mustCLI(t, sock, "status")
	for _, want := range []string{"site-test", "appliance-test", "active=true", "epoch=1", "2 (2 live) for 1 nodes"} {
		if !strings.Contains(status, want) {
			t.Errorf("status lacks %q:\n%s", want, status)
		}
	}

	out = mustCLI(t, sock, "entry", "rm", "--node-id", "node-17", "--mac", "52:54:00:AB:CD:02")
	if !strings.Contains(out, "removed 1: 52:54:00:ab:cd:02") {
		t.Fatalf("entry rm output: %q", out)
	}
	if n := len(listJSON(t, sock).Entries); n != 1 {
		t.Fatalf("after rm: %d entries, want 1", n)
	}
}

// Every refusal names the field, exits non-zero with one line, and leaves
// the state as it was.
func TestCLIRefusalsChangeNothing(t *testing.T) {
	a := startAppliance(t, testConfig(t))
	sock := a.cfg.Admin.Socket
	mustCLI(t, sock, "entry", "add", "--node-id", "owner", "--mac", "52:54:00:00:00:01")
	before := listJSON(t, sock)

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"invalid mac", []string{"entry", "add", "--node-id", "n2", "--mac", "52:54:00:00:00:02", "--mac", "not-a-mac"},
			`entries[1].mac: "not-a-mac" is not a MAC address (InvalidArgument)`},
		{"past not_after", []string{"entry", "add", "--node-id", "n2", "--mac", "52:54:00:00:00:02", "--not-after", "2020-01-01T00:00:00Z"},
			"entries[0].not_after: 2020-01-01T00:00:00Z is not in the future"},
		{"mac of another node", []string{"entry", "add", "--node-id", "n2", "--mac", "52:54:00:00:00:02", "--mac", "52-54-00-00-00-01"},
			`entries[1].mac: 52:54:00:00:00:01 already belongs to node "owner" (clean it up there first) (FailedPrecondition)`},
		{"bad script url", []string{"entry", "add", "--node-id", "n2", "--mac", "52:54:00:00:00:02", "--script-url", "boot.ipxe"},
			"entries[0].ipxe_script_url:"},
		{"bad token ref", []string{"entry", "add", "--node-id", "n2", "--mac", "52:54:00:00:00:02", "--discovery-token-ref", "abc"},
			"entries[0].discovery_token_ref: secret ref must be"},
		{"bad arch flag", []string{"entry", "add", "--node-id", "n2", "--mac", "52:54:00:00:00:02", "--arch", "sparc"},
			`--arch: unknown arch "sparc"`},
		{"bad sanboot flag", []string{"entry", "add", "--node-id", "n2", "--mac", "52:54:00:00:00:02", "--sanboot-sha256", "abc"},
			"--sanboot-sha256:"},
		{"ttl and not-after", []string{"entry", "add", "--node-id", "n2", "--mac", "52:54:00:00:00:02", "--ttl", "1h", "--not-after", "2030-01-01T00:00:00Z"},
			"none of the others can be"},
		{"missing node", []string{"entry", "add", "--mac", "52:54:00:00:00:02"}, `required flag(s) "node-id" not set`},
		{"rm without node", []string{"entry", "rm"}, `required flag(s) "node-id" not set`},
		{"rm bad mac", []string{"entry", "rm", "--node-id", "owner", "--mac", "zz"}, "macs[0]:"},
		{"bad output", []string{"entry", "ls", "-o", "yaml"}, `--output "yaml"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := cli(t, sock, tt.args...)
			if err == nil {
				t.Fatal("command succeeded")
			}
			line := errorLine(err)
			if !strings.Contains(line, tt.want) || strings.Contains(line, "\n") {
				t.Fatalf("error line = %q; want one line containing %q", line, tt.want)
			}
			if diff := cmp.Diff(before, listJSON(t, sock)); diff != "" {
				t.Fatalf("state changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestCLIUnreachable(t *testing.T) {
	_, _, err := cli(t, t.TempDir()+"/nothing.sock", "status", "--timeout", "2s")
	if err == nil {
		t.Fatal("status against a missing socket succeeded")
	}
	if line := errorLine(err); !strings.Contains(line, "cannot reach the appliance") || !strings.Contains(line, "SITEBOOT_SOCKET") {
		t.Fatalf("error line = %q", line)
	}
}
