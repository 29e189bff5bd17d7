package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/siteboot/siteboot/discovery"
)

// assertionFromScript is the bc.assertion= value of the ramdisk script the
// appliance's /ipxe serves mac.
func assertionFromScript(t *testing.T, sock, mac string) string {
	t.Helper()
	script := getIPXE(t, sock, mac)
	m := regexp.MustCompile(`bc\.assertion=(\S+)`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("the script carries no assertion:\n%s", script)
	}
	return m[1]
}

// cliIn is cli with stdin.
func cliIn(t *testing.T, socket string, stdin string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd(&out, io.Discard, func(string) (string, bool) { return "", false })
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"--socket", socket}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// An assertion from a script a real appliance served verifies against the
// keys its /v1/keys serves, here and through the API; one changed
// character, or a minimum epoch above its own, fails with the reason.
func TestCLIAssertionVerify(t *testing.T) {
	cfg := testConfig(t)
	cfg.Ramdisk.Kernel = "http://10.0.0.9/vmlinuz"
	cfg.Ramdisk.Initrd = "http://10.0.0.9/initrd.img"
	cfg.DHCP.Enabled, cfg.TFTP.Enabled = "false", "false" // HTTP is all this test needs
	a := startAppliance(t, cfg)
	sock := a.cfg.Admin.Socket
	const mac = "52:54:00:00:00:01"
	mustCLI(t, sock, "entry", "add", "--node-id", "n1", "--mac", mac, "--workflow-id", "wf-7")
	st, err := getStatus(sock)
	if err != nil {
		t.Fatal(err)
	}
	epoch := st.GetLease().GetEpoch()
	keysURL := "http://" + httpAddr(t, sock) + "/v1/keys"

	text := assertionFromScript(t, sock, mac)
	dir := t.TempDir()
	file := writeFile(t, dir, "assertion.txt", "\n  "+text+"\n")
	changed := writeFile(t, dir, "changed.txt", text[:len(text)/2]+flip(text[len(text)/2])+text[len(text)/2+1:])
	keysFile := writeFile(t, dir, "keys.json", fetch(t, keysURL))
	minAbove := strconv.FormatUint(epoch+1, 10)

	tests := []struct {
		name    string
		args    []string
		stdin   string
		wantErr string // "" = valid
	}{
		{"keys URL", []string{"assertion", "verify", "--keys", keysURL, file}, "", ""},
		{"keys file, its own epoch", []string{"assertion", "verify", "--keys", keysFile, "--min-epoch", strconv.FormatUint(epoch, 10), file}, "", ""},
		{"stdin", []string{"assertion", "verify", "--keys", keysURL, "-"}, text + "\n", ""},
		{"through the API", []string{"assertion", "verify", file}, "", ""},
		{"one character changed", []string{"assertion", "verify", "--keys", keysURL, changed}, "", "the assertion is not valid: "},
		{"one character changed, API", []string{"assertion", "verify", changed}, "", "the assertion is not valid: "},
		{"min epoch above", []string{"assertion", "verify", "--keys", keysURL, "--min-epoch", minAbove, file}, "", "the assertion is not valid: stale-epoch: boot_lease_epoch " + strconv.FormatUint(epoch, 10) + " is below the minimum " + minAbove},
		{"min epoch above, API", []string{"assertion", "verify", "--min-epoch", minAbove, file}, "", "stale-epoch"},
		{"keys of another site", []string{"assertion", "verify", "--keys", otherKeys(t, dir), file}, "", "unknown-key"},
		{"keys URL not found", []string{"assertion", "verify", "--keys", keysURL + "x", file}, "", "HTTP 404"},
		{"keys not a JWKS", []string{"assertion", "verify", "--keys", file, file}, "", "not a JSON JWK Set"},
		{"no such file", []string{"assertion", "verify", "--keys", keysURL, filepath.Join(dir, "none")}, "", "no such file"},
		{"empty stdin", []string{"assertion", "verify", "--keys", keysURL, "-"}, " \n", "malformed: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := cliIn(t, sock, tt.stdin, tt.args...)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("%v\n%s", errorLine(err), out)
				}
				for _, want := range []string{"valid", "yes", "mac", mac, "workflow", "wf-7", "site-test", "appliance-test"} {
					if !strings.Contains(out, want) {
						t.Errorf("output lacks %q:\n%s", want, out)
					}
				}
				return
			}
			if err == nil || !strings.Contains(errorLine(err), tt.wantErr) {
				t.Fatalf("err = %v; want one containing %q\n%s", err, tt.wantErr, out)
			}
		})
	}

	// -o json is the API's response, here and through the API alike.
	for _, args := range [][]string{{"--keys", keysURL, file}, {file}} {
		out := mustCLI(t, sock, append([]string{"assertion", "verify", "-o", "json"}, args...)...)
		var got struct {
			Valid     bool   `json:"valid"`
			KeyID     string `json:"keyId"`
			Assertion struct {
				Mac            string `json:"mac"`
				BootLeaseEpoch string `json:"bootLeaseEpoch"`
			} `json:"assertion"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if !got.Valid || got.KeyID != st.GetNodeKeyId() || got.Assertion.Mac != mac || got.Assertion.BootLeaseEpoch != strconv.FormatUint(epoch, 10) {
			t.Fatalf("-o json %v = %s", args, out)
		}
	}
}

// --keys over HTTP is bounded: a huge body and a redirect are refused.
func TestCLIAssertionKeysBounded(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/big", http.StatusFound)
			return
		}
		w.Write(bytes.Repeat([]byte(" "), 1<<20))
	}))
	defer ts.Close()
	file := writeFile(t, t.TempDir(), "a.txt", "AAAA")
	for path, want := range map[string]string{"/big": "larger than 65536 bytes", "/redirect": "redirects are not followed"} {
		_, err := cliIn(t, "/nonexistent.sock", "", "assertion", "verify", "--keys", ts.URL+path, file)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--keys %s: %v; want %q", path, err, want)
		}
	}
}

func fetch(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// otherKeys writes the JWKS of another node key.
func otherKeys(t *testing.T, dir string) string {
	t.Helper()
	s, err := discovery.LoadOrCreateKey(filepath.Join(dir, "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := discovery.NewKeySet(s.Public())
	if err != nil {
		t.Fatal(err)
	}
	data, err := set.MarshalJWKS()
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, "other.json", string(data))
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}
