package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

func httpAddr(t *testing.T, socket string) string {
	t.Helper()
	st, err := getStatus(socket)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range st.GetListeners() {
		if l.GetService() == "http" {
			return l.GetAddress()
		}
	}
	t.Fatal("status lists no http listener")
	return ""
}

func TestCLIScriptAndDiscovered(t *testing.T) {
	t.Setenv("SITEBOOT_SECRET_TEST_TOKEN", "tok-very-secret")
	cfg := testConfig(t)
	cfg.Ramdisk.Kernel = "http://10.0.0.9/vmlinuz"
	cfg.Ramdisk.Initrd = "http://10.0.0.9/initrd.img"
	cfg.Ramdisk.Cmdline = "console=ttyS0"
	a := startAppliance(t, cfg)
	sock := a.cfg.Admin.Socket
	mustCLI(t, sock, "entry", "add", "--node-id", "n1", "--mac", "52:54:00:00:00:01", "--workflow-id", "wf-7",
		"--discovery-token-ref", "env://SITEBOOT_SECRET_TEST_TOKEN")

	out := mustCLI(t, sock, "script", "--mac", "52-54-00-00-00-01", "--buildarch", "x86_64", "--platform", "efi")
	for _, want := range []string{"#!ipxe", "kernel --name kernel http://10.0.0.9/vmlinuz initrd=initrd console=ttyS0",
		"bc.workflow_id=wf-7", "bc.discovery_token=REDACTED", "bc.assertion=REDACTED", "initrd --name initrd http://10.0.0.9/initrd.img"} {
		if !strings.Contains(out, want) {
			t.Errorf("script lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "tok-very-secret") {
		t.Fatalf("script shows the token without --reveal-secrets:\n%s", out)
	}
	if os.Geteuid() == 0 {
		out := mustCLI(t, sock, "script", "--mac", "52:54:00:00:00:01", "--reveal-secrets")
		if !strings.Contains(out, "bc.discovery_token=tok-very-secret") || strings.Contains(out, "bc.assertion=REDACTED") {
			t.Fatalf("--reveal-secrets as root does not show the token and a signed assertion:\n%s", out)
		}
	}
	if _, _, err := cli(t, sock, "script", "--mac", "nonsense"); err == nil || !strings.Contains(errorLine(err), "(InvalidArgument)") {
		t.Fatalf("script with a bad MAC: %v", err)
	}

	// Neither a preview nor /ipxe records an unknown machine: only DHCP
	// feeds the discovered list.
	if out := mustCLI(t, sock, "script", "--mac", "52:54:00:00:00:77"); !strings.Contains(out, "not registered") {
		t.Fatalf("unknown machine preview:\n%s", out)
	}
	resp, err := http.Get("http://" + httpAddr(t, sock) + "/ipxe?mac=52:54:00:00:00:77&uuid=4C4C4544-0047-3510-8052-B4C04F4E3832&buildarch=i386&platform=pcbios")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "not registered") {
		t.Fatalf("/ipxe for an unknown machine: %d %s", resp.StatusCode, body)
	}
	var got struct {
		Machines []struct{ Mac string }
	}
	raw := mustCLI(t, sock, "discovered", "ls", "-o", "json")
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Machines) != 0 {
		t.Fatalf("discovered ls after a script request = %s; HTTP must not add machines", raw)
	}
	if status := mustCLI(t, sock, "status"); !strings.Contains(status, "discovered    0") {
		t.Fatalf("status counts a discovered machine:\n%s", status)
	}
}
