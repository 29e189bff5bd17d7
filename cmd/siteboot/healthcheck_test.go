package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// runHealthcheck runs `siteboot healthcheck args…` in process with the
// given environment.
func runHealthcheck(t *testing.T, environ map[string]string, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) (string, bool) { v, ok := environ[k]; return v, ok }
	root := newRootCmd(&out, &errb, getenv)
	root.SetArgs(append([]string{"healthcheck"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// A ready appliance passes the check, found by --url, by the config file
// serve reads, or by SITEBOOT_HTTP_LISTEN; the answer's line is printed.
func TestHealthcheckReadyAppliance(t *testing.T) {
	a := startAppliance(t, testConfig(t))
	addr := httpAddr(t, a.cfg.Admin.Socket)
	conf := filepath.Join(t.TempDir(), "siteboot.yaml")
	if err := os.WriteFile(conf, []byte("site_id: x\nhttp:\n  listen: "+addr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"url", nil, []string{"--url", "http://" + addr + "/readyz"}},
		{"config file", nil, []string{"--config", conf}},
		{"environment", map[string]string{"SITEBOOT_HTTP_LISTEN": addr}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runHealthcheck(t, tc.env, tc.args...)
			if err != nil {
				t.Fatalf("healthcheck of a ready appliance: %v", err)
			}
			if diff := cmp.Diff("ready: lease active=true epoch=1\n", out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

// Every answer but a 200 from the asked address fails the check with a
// message saying what was wrong, bounded and free of control characters.
func TestHealthcheckNotReady(t *testing.T) {
	notReady := serveHTTP(t, func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready: the replicated state is not restored yet (raft Candidate)", http.StatusServiceUnavailable)
	})
	ok := serveHTTP(t, func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ready\n")) })
	redirect := serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, ok+"/readyz", http.StatusFound)
	})
	hostile := serveHTTP(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte("\x1b]0;owned\x07" + strings.Repeat("A", 4096)))
	})
	hang := serveHTTP(t, func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	// net/http's client passes a reason phrase through as it came.
	hostileStatus := serveRaw(t, "HTTP/1.1 500 \x1b]0;owned\x07"+strings.Repeat("B", 4096)+"\r\nContent-Length: 0\r\n\r\n")
	cases := []struct {
		name, url string
		want      []string
	}{
		{"503 not ready", notReady + "/readyz", []string{"not ready: 503 Service Unavailable: not ready: the replicated state is not restored yet (raft Candidate)"}},
		{"nothing listening", "http://" + closedAddr(t) + "/readyz", []string{"connection refused", "is 'siteboot serve' running"}},
		{"redirect is not followed", redirect + "/readyz", []string{"not ready: 302 Found"}},
		{"no answer in time", hang + "/readyz", []string{"no answer within 300ms"}},
		{"hostile answer", hostile + "/readyz", []string{"500 Internal Server Error: ?]0;owned?AAAA"}},
		{"hostile status line", hostileStatus + "/readyz", []string{"not ready: 500 ?]0;owned?BBBB"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runHealthcheck(t, nil, "--url", tc.url, "--timeout", "300ms")
			if err == nil {
				t.Fatalf("healthcheck passed (output %q)", out)
			}
			line := errorLine(err)
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("error %q does not say %q", line, w)
				}
			}
			if n := len(line); n > healthBodyLimit+200 {
				t.Errorf("error line is %d bytes; the answer's part must be bounded", n)
			}
			if strings.ContainsAny(line, "\x1b\x07") {
				t.Errorf("error line carries control characters: %q", line)
			}
		})
	}
}

// Bad flags and config are refused before anything is asked, naming what
// is wrong.
func TestHealthcheckBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("http:\n  lisen: :8080\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"not http", nil, []string{"--url", "file:///etc/passwd"}, `--url "file:///etc/passwd": want an http:// or https:// URL`},
		{"no host", nil, []string{"--url", "http:///readyz"}, "want an http:// or https:// URL with a host"},
		{"url and config", nil, []string{"--url", "http://127.0.0.1:1/readyz", "--config", bad}, "--url and --config: give one of them"},
		{"zero timeout", nil, []string{"--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{"unknown config key", nil, []string{"--config", bad}, "field lisen not found"},
		{"missing config", nil, []string{"--config", bad + ".missing"}, "no such file"},
		{"bad listen", map[string]string{"SITEBOOT_HTTP_LISTEN": "8080"}, nil, `http.listen "8080"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runHealthcheck(t, tc.env, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v; want one saying %q", err, tc.want)
			}
		})
	}
}

func TestReadyzURL(t *testing.T) {
	cases := map[string]string{
		":8080":      "http://127.0.0.1:8080/readyz",
		"0.0.0.0:80": "http://127.0.0.1:80/readyz",
		// serve listens dual-stack on "[::]", and ::1 is missing where
		// IPv6 is disabled (net.ipv6.conf.lo.disable_ipv6=1).
		"[::]:8080":      "http://127.0.0.1:8080/readyz",
		"10.0.0.2:8080":  "http://10.0.0.2:8080/readyz",
		"[fd00::2]:8080": "http://[fd00::2]:8080/readyz",
		"boot.lan:8080":  "http://boot.lan:8080/readyz",
	}
	for listen, want := range cases {
		got, err := readyzURL(listen)
		if err != nil || got != want {
			t.Errorf("readyzURL(%q) = %q, %v; want %q", listen, got, err, want)
		}
	}
}

// The binary's exit status is the contract a container runtime reads: 0
// for a ready appliance, 1 with one line on stderr otherwise.
func TestHealthcheckExitStatus(t *testing.T) {
	a := startAppliance(t, testConfig(t))
	addr := httpAddr(t, a.cfg.Admin.Socket)
	for _, tc := range []struct {
		name, url string
		code      int
		stderr    string
	}{
		{"ready", "http://" + addr + "/readyz", 0, ""},
		{"down", "http://" + closedAddr(t) + "/readyz", 1, "siteboot: healthcheck http://"},
	} {
		cmd := exec.Command(sitebootBinary(t), "healthcheck", "--url", tc.url, "--timeout", "2s")
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.HasPrefix(errb.String(), tc.stderr) || strings.Count(errb.String(), "\n") > 1 {
			t.Errorf("%s: exit %d, stderr %q; want exit %d, one line starting %q", tc.name, code, errb.String(), tc.code, tc.stderr)
		}
	}
}

// serveHTTP runs handler on a loopback port until the test ends and
// returns its base URL.
func serveHTTP(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(handler)
	t.Cleanup(s.Close)
	return s.URL
}

// serveRaw answers every connection on a loopback port with answer, as
// bytes, until the test ends, and returns its base URL.
func serveRaw(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Read(make([]byte, 4096))
			c.Write([]byte(answer))
			c.Close()
		}
	}()
	return "http://" + ln.Addr().String()
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
