package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

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
		{"header without colon", with(proxy, "--header", "X-Trace"), "--header number 1: want NAME:VALUE"},
		{"header without name", with(proxy, "--header", ": v"), "--header number 1: want NAME:VALUE"},
		{"secret header without ref", with(proxy, "--secret-header", "Authorization"), "--secret-header number 1: want NAME:REF"},
		{"secret header with a value", with(proxy, "--secret-header", "X-A:file:///s", "--secret-header", "Authorization:Bearer tok"), "--secret-header Authorization: want a secret ref"},
		{"bmc with a value for the ref", []string{"bmc", "--driver", "ipmi", "--address", "10.20.0.11", "--credentials-ref", "pw", "power.getPower"}, "--credentials-ref: want a secret ref"},
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

// A response prints as the status line, its headers (a value with a
// control character quoted), a blank line and the body unchanged; a cut
// body says so on stderr.
func TestShowProxyResponse(t *testing.T) {
	resp := &sitev1.HttpProxyResponse{Status: 302, Body: []byte("moved\x00\n"), Truncated: true, Headers: []*sitev1.HttpProxyHeader{
		{Name: "Location", Value: "https://elsewhere.example/"}, {Name: "X-Odd", Value: "a\x1b[2Jb"}}}
	var out, errOut bytes.Buffer
	if err := showProxyResponse(&out, &errOut, "table", resp); err != nil {
		t.Fatal(err)
	}
	want := "HTTP 302\nLocation: https://elsewhere.example/\nX-Odd: \"a\\x1b[2Jb\"\n\nmoved\x00\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	if errOut.String() != "(truncated)\n" {
		t.Errorf("stderr %q; want (truncated)", errOut.String())
	}
	out.Reset()
	errOut.Reset()
	resp.Truncated = false
	if err := showProxyResponse(&out, &errOut, "json", resp); err != nil {
		t.Fatal(err)
	}
	var js struct {
		Status int    `json:"status"`
		Body   []byte `json:"body"`
	}
	if err := json.Unmarshal(out.Bytes(), &js); err != nil || js.Status != 302 || string(js.Body) != "moved\x00\n" || errOut.Len() != 0 {
		t.Errorf("-o json: %v, stdout %s, stderr %q", err, out.String(), errOut.String())
	}
}

// --body reads the string, a file or stdin, bounded; headers split at the
// first colon with the blanks after it dropped.
func TestProxyRequestFromFlags(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "body.json", `{"a":1}`)
	big := writeFile(t, dir, "big", strings.Repeat("x", maxProxyBody+1))
	f := proxyFlags{targetNode: "talos-1", url: "https://10.0.0.51/x", method: "post", body: "@" + file,
		headers: []string{"Content-Type: application/json", "X-Url:https://a.example/b:c"}, secretHeaders: []string{"Authorization:env://SITEBOOT_SECRET_T"},
		spki: strings.Repeat("ab:", 31) + "ab", timeout: 1500 * time.Millisecond}
	req, err := f.request(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{"method": req.GetMethod(), "body": string(req.GetBody()), "timeout_ms": req.GetTimeoutMs(), "pin": len(req.GetTlsSpkiSha256()),
		"headers": headerPairs(req.GetHeaders()), "secret": headerPairs(req.GetSecretHeaders()), "node": req.GetTargetNodeId(), "url": req.GetUrl()}
	want := map[string]any{"method": "POST", "body": `{"a":1}`, "timeout_ms": uint32(1500), "pin": 32,
		"headers": []string{"Content-Type=application/json", "X-Url=https://a.example/b:c"}, "secret": []string{"Authorization=env://SITEBOOT_SECRET_T"},
		"node": "talos-1", "url": "https://10.0.0.51/x"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	for arg, wantBody := range map[string]string{"@-": "from stdin", "plain text": "plain text", "": ""} {
		f := proxyFlags{body: arg}
		req, err := f.request(strings.NewReader("from stdin"))
		if err != nil || string(req.GetBody()) != wantBody {
			t.Errorf("--body %q: %q, %v; want %q", arg, req.GetBody(), err, wantBody)
		}
	}
	f = proxyFlags{body: "@" + big}
	if _, err := f.request(strings.NewReader("")); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("--body of %d bytes: %v; want refused", maxProxyBody+1, err)
	}
}

func headerPairs(hs []*sitev1.HttpProxyHeader) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.GetName()+"="+h.GetValue())
	}
	return out
}
