package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/spf13/cobra"
)

// Flag mistakes are refused before the appliance is asked: no server runs
// here, so a command that dialled would fail differently (after waiting).
func TestRelayFlagValidation(t *testing.T) {
	nothing := t.TempDir() + "/nothing.sock"
	bmc := []string{"bmc", "--driver", "ipmi", "--address", "10.20.0.11", "--credentials-ref", "env://SITEBOOT_SECRET_BMC"}
	proxy := []string{"proxy", "--target-node", "talos-1", "--url", "https://10.0.0.51/version"}
	with := func(base []string, more ...string) []string { return append(append([]string{}, base...), more...) }
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"VALUE and --args", with(bmc, "power.setPower", "on", "--args", `{"state":"off"}`), `power.setPower: give its VALUE "on" or --args, not both`},
		{"VALUE on an operation without one", with(bmc, "power.getPower", "on"), `power.getPower takes no VALUE ("on"); give its arguments with --args JSON`},
		{"VALUE on an unknown operation", with(bmc, "virtual-media.eject", "CD"), "virtual-media.eject takes no VALUE"},
		{"--persistent without a device", with(bmc, "management.setBootDevice", "--persistent", "--args", `{"device":"pxe"}`), "--persistent and --efi go with management.setBootDevice DEVICE"},
		{"--efi on power", with(bmc, "power.setPower", "on", "--efi"), "--persistent and --efi go with management.setBootDevice, not power.setPower"},
		{"pin not hex", with(bmc, "power.getPower", "--spki-sha256", "zz"), "--spki-sha256: want the SHA-256"},
		{"pin too short", with(bmc, "power.getPower", "--spki-sha256", strings.Repeat("ab", 31)), "--spki-sha256: want the SHA-256"},
		{"no operation", bmc, "accepts between 1 and 2 arg(s), received 0"},
		{"too many arguments", with(bmc, "power.setPower", "on", "now"), "accepts between 1 and 2 arg(s), received 3"},
		{"bmc without driver", []string{"bmc", "--address", "10.20.0.11", "--credentials-ref", "env://X", "power.getPower"}, `required flag(s) "driver" not set`},
		{"bmc without address and ref", []string{"bmc", "--driver", "ipmi", "power.getPower"}, `required flag(s) "address", "credentials-ref" not set`},
		{"bmc bad output", with(bmc, "power.getPower", "-o", "yaml"), `--output "yaml": want table or json`},
		{"header without colon", with(proxy, "--header", "X-Trace"), `--header "X-Trace": want NAME:VALUE`},
		{"header without name", with(proxy, "--header", ": v"), `--header ": v": want NAME:VALUE`},
		{"secret header without ref", with(proxy, "--secret-header", "Authorization"), `--secret-header "Authorization": want NAME:REF`},
		{"proxy pin", with(proxy, "--spki-sha256", "abcd"), "--spki-sha256: want the SHA-256"},
		{"timeout below a millisecond", with(proxy, "--timeout", "500us"), "--timeout 500µs: want 1ms or more"},
		{"negative timeout", with(proxy, "--timeout", "-1s"), "--timeout -1s"},
		{"body file missing", with(proxy, "--body", "@/nonexistent/body.json"), "--body: open /nonexistent/body.json"},
		{"proxy without url", []string{"proxy", "--target-node", "talos-1"}, `required flag(s) "url" not set`},
		{"proxy with an argument", with(proxy, "GET"), `unknown command "GET" for "siteboot proxy"`},
		{"proxy bad output", with(proxy, "-o", "yaml"), `--output "yaml": want table or json`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := cli(t, nothing, tt.args...)
			if err == nil {
				t.Fatal("command succeeded")
			}
			if line := stderrLine(err); !strings.Contains(line, tt.want) || strings.Contains(line, "cannot reach") {
				t.Fatalf("stderr line = %q; want it to contain %q", line, tt.want)
			}
		})
	}
}

// The shorthand VALUE becomes the operation's canonical args_json.
func TestBmcShorthand(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"power.setPower", "on"}, `{"state":"on"}`},
		{[]string{"power.setPower", "cycle"}, `{"state":"cycle"}`},
		{[]string{"management.setBootDevice", "pxe"}, `{"device":"pxe"}`},
		{[]string{"management.setBootDevice", "disk", "--persistent", "--efi"}, `{"device":"disk","efi":true,"persistent":true}`},
		{[]string{"management.setBootDevice", "bios", "--efi=false"}, `{"device":"bios"}`},
		{[]string{"virtual-media.insert", "https://10.0.0.2/cache/ab"}, `{"kind":"CD","url":"https://10.0.0.2/cache/ab"}`},
		{[]string{"power.getPower"}, ``},
		{[]string{"virtual-media.eject", "--args", `{"kind":"DVD"}`}, `{"kind":"DVD"}`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var req *sitev1.BmcOperationRequest
			c := newBmcCmdRunning(&clientOptions{}, func(_ *cobra.Command, r *sitev1.BmcOperationRequest) error { req = r; return nil })
			c.SetArgs(append([]string{"--driver", "ipmi", "--address", "10.20.0.11", "--credentials-ref", "env://X"}, tt.args...))
			if err := c.Execute(); err != nil {
				t.Fatal(err)
			}
			if req.GetDriver() != "ipmi" || req.GetAddress() != "10.20.0.11" || req.GetCredentialsRef() != "env://X" {
				t.Fatalf("request = %v", req)
			}
			if req.GetArgsJson() != tt.want || req.GetOperation() != tt.args[0] {
				t.Fatalf("operation %q args_json %q; want %q %q", req.GetOperation(), req.GetArgsJson(), tt.args[0], tt.want)
			}
		})
	}
}

// A result prints as sorted "key: value" lines; a BMC's text with control
// characters is quoted; a failure is the "bmc: CODE: MESSAGE" line.
func TestPrintBmcResult(t *testing.T) {
	tests := []struct {
		name     string
		res      *sitev1.BmcOperationResult
		out, err string
	}{
		{"power", &sitev1.BmcOperationResult{Ok: true, ResultJson: `{"power":"on"}`}, "power: on\n", ""},
		{"fields in order, nested compact", &sitev1.BmcOperationResult{Ok: true,
			ResultJson: `{"vendor":"ACME\u001b[2J","bios":{"version": "1.2"},"power":"off","serial":7}`},
			"bios: {\"version\":\"1.2\"}\npower: off\nserial: 7\nvendor: \"ACME\\x1b[2J\"\n", ""},
		{"failure", &sitev1.BmcOperationResult{ErrorCode: "forbidden-target", Message: "10.9.0.1 is not in bmc.networks"},
			"", "bmc: forbidden-target: 10.9.0.1 is not in bmc.networks"},
		{"failure without a code", &sitev1.BmcOperationResult{Message: "odd"}, "", "bmc: internal: odd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := printBmcResult(&out, "table", tt.res)
			if diff := cmp.Diff(tt.out, out.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			got := ""
			if err != nil {
				got = stderrLine(err)
				if _, ok := errors.AsType[*relayFailure](err); !ok {
					t.Errorf("error %T is not a relay failure", err)
				}
			}
			if got != tt.err {
				t.Errorf("stderr line %q; want %q", got, tt.err)
			}
		})
	}
}

// --help teaches: every operation, the allow-lists, the codes, examples.
func TestRelayHelpTeaches(t *testing.T) {
	for cmd, wants := range map[string][]string{
		"bmc": {"power.getPower", "power.setPower on|off|soft|reset|cycle", "management.setBootDevice pxe|disk|cdrom|bios", "--persistent",
			"virtual-media.insert URL", "virtual-media.eject", "inspect.inspect", "bmc.networks", "forbidden-target", `{"username": "...", "password": "..."}`,
			"secrets.dir", "--driver-options '{\"cipherSuite\": 3}'", "--spki-sha256", "Examples:", "exits 1"},
		"proxy": {"proxyTargets", "siteboot site apply", "--secret-header Authorization:file://", "httpproxy.provisioning_networks",
			"bmc.networks", "forbidden-target", "(truncated)", "--body @-", "Examples:", "exits 1", "HTTP STATUS"},
	} {
		out, _, err := cli(t, "", cmd, "--help")
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %q", cmd, w)
			}
		}
	}
}
