package main

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretRefsConfined: an entry whose discovery token ref points at the
// node key, /etc/shadow or an ordinary variable yields no token on the
// unauthenticated /ipxe (whether entry add refuses the ref or the
// resolver does); refs inside secrets.dir and secrets.env_prefix work.
func TestSecretRefsConfined(t *testing.T) {
	t.Setenv("SITEBOOT_SECRET_TEST_TOK", "tok-from-env")
	cfg := testConfig(t)
	cfg.DHCP.Enabled, cfg.TFTP.Listen = "false", ""
	cfg.Ramdisk.Kernel, cfg.Ramdisk.Initrd = "http://10.0.0.9/vmlinuz", "http://10.0.0.9/initrd.img"
	cfg.Secrets.Dir = filepath.Join(t.TempDir(), "secrets")
	if err := os.Mkdir(cfg.Secrets.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Secrets.Dir, "token"), []byte("tok-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	a := startAppliance(t, cfg)
	sock := a.cfg.Admin.Socket
	key, err := os.ReadFile(filepath.Join(cfg.DataDir, "node.key"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		mac, ref, want string // want: the token /ipxe may carry, "" for none
	}{
		{"52:54:00:00:00:01", "file://" + filepath.Join(cfg.DataDir, "node.key"), ""},
		{"52:54:00:00:00:02", "file:///etc/shadow", ""},
		{"52:54:00:00:00:03", "env://PATH", ""},
		{"52:54:00:00:00:04", "file://" + filepath.Join(cfg.Secrets.Dir, "token"), "tok-from-file"},
		{"52:54:00:00:00:05", "env://SITEBOOT_SECRET_TEST_TOK", "tok-from-env"},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			_, _, err := cli(t, sock, "entry", "add", "--node-id", "n1", "--mac", tc.mac, "--workflow-id", "wf-1", "--discovery-token-ref", tc.ref)
			switch {
			case err != nil && (tc.want != "" || !strings.Contains(errorLine(err), tc.ref) || !strings.Contains(errorLine(err), "discovery_token_ref")):
				t.Fatalf("entry add: %v", errorLine(err))
			case err != nil:
				return // refused when stored, naming the field and the ref
			case tc.want == "":
				t.Fatalf("entry add accepted %s: a ref that can never resolve here must be refused when stored", tc.ref)
			}
			body := getIPXE(t, sock, tc.mac)
			if tc.want != "" {
				if !strings.Contains(body, "bc.discovery_token="+tc.want) {
					t.Fatalf("/ipxe lacks the token:\n%s", body)
				}
				return
			}
			// The body is not printed: it would hold what leaked.
			if strings.Contains(body, "bc.discovery_token=") {
				t.Fatalf("/ipxe serves a token from %s (%d-byte body)", tc.ref, len(body))
			}
			plain, err := url.QueryUnescape(body)
			if err != nil {
				plain = body
			}
			for _, line := range append(strings.Split(string(key), "\n"), os.Getenv("PATH")) {
				if len(line) >= 8 && !strings.HasPrefix(line, "-----") && strings.Contains(plain, line) {
					t.Fatalf("/ipxe serves part of the node key or PATH (%d-byte body)", len(body))
				}
			}
		})
	}
}

func getIPXE(t *testing.T, sock, mac string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr(t, sock) + "/ipxe?mac=" + mac + "&buildarch=x86_64&platform=efi")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
