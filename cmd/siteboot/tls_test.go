package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"github.com/siteboot/siteboot/admin"
	"github.com/siteboot/siteboot/appliance"
	"github.com/siteboot/siteboot/internal/testpki"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki is the test CA of the admin listener.
type pki struct{ *testpki.CA }

func newPKI(t *testing.T) *pki { return &pki{testpki.NewCA(t, "test ca")} }

// caPEM is the CA bundle the listener trusts.
func (p *pki) caPEM() string { return string(p.PEM) }

// issue returns PEM cert and key for a leaf.
func (p *pki) issue(t *testing.T, cn string, usage x509.ExtKeyUsage, ips ...net.IP) (string, string) {
	t.Helper()
	c, k := p.Issue(t, cn, testpki.Leaf{Usages: []x509.ExtKeyUsage{usage}, IPs: ips})
	return string(c), string(k)
}

func TestAdminOverMutualTLS(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	srvCert, srvKey := p.issue(t, "siteboot", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	cliCert, cliKey := p.issue(t, "operator", x509.ExtKeyUsageClientAuth)
	ca := writeFile(t, dir, "ca.pem", p.caPEM())

	cfg := testConfig(t)
	cfg.Admin.TCPListen = freePort(t)
	cfg.Admin.TLS.Cert = writeFile(t, dir, "srv.pem", srvCert)
	cfg.Admin.TLS.Key = writeFile(t, dir, "srv.key", srvKey)
	cfg.Admin.TLS.ClientCA = ca
	startAppliance(t, cfg)

	out := mustCLI(t, "/nonexistent.sock", "--server", cfg.Admin.TCPListen, "--tls-ca", ca,
		"--tls-cert", writeFile(t, dir, "cli.pem", cliCert), "--tls-key", writeFile(t, dir, "cli.key", cliKey), "status")
	if !strings.Contains(out, "active=true") {
		t.Fatalf("status over mTLS: %q", out)
	}

	// The same from the environment, as a shell profile would set it.
	env := map[string]string{"SITEBOOT_SERVER": cfg.Admin.TCPListen, "SITEBOOT_TLS_CA": ca,
		"SITEBOOT_TLS_CERT": writeFile(t, dir, "cli-env.pem", cliCert), "SITEBOOT_TLS_KEY": writeFile(t, dir, "cli-env.key", cliKey)}
	var envOut, envErr bytes.Buffer
	root := newRootCmd(&envOut, &envErr, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	root.SetArgs([]string{"status"})
	if err := root.ExecuteContext(context.Background()); err != nil || !strings.Contains(envOut.String(), "active=true") {
		t.Fatalf("status with SITEBOOT_SERVER and SITEBOOT_TLS_*: %v %q %q", err, envOut.String(), envErr.String())
	}
	// An explicit --socket beats the exported SITEBOOT_SERVER.
	envOut.Reset()
	root = newRootCmd(&envOut, &envErr, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	root.SetArgs([]string{"--socket", filepath.Join(dir, "absent.sock"), "--timeout", "1s", "status"})
	if err := root.ExecuteContext(context.Background()); err == nil || strings.Contains(errorLine(err), cfg.Admin.TCPListen) {
		t.Fatalf("--socket with SITEBOOT_SERVER exported went to %s: %v", cfg.Admin.TCPListen, err)
	}

	// Without a client certificate the handshake is refused.
	conn, err := tls.Dial("tcp", cfg.Admin.TCPListen, &tls.Config{RootCAs: poolOf(p.Cert), NextProtos: []string{"h2"}})
	if err == nil {
		// TLS 1.3 reports the missing certificate on the first read.
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("client without certificate: %v; want certificate required", err)
	}

	// A certificate from another CA is refused too.
	other := newPKI(t)
	oc, ok := other.issue(t, "intruder", x509.ExtKeyUsageClientAuth)
	_, _, err = cli(t, "/nonexistent.sock", "--server", cfg.Admin.TCPListen, "--tls-ca", ca, "--timeout", "3s",
		"--tls-cert", writeFile(t, dir, "o.pem", oc), "--tls-key", writeFile(t, dir, "o.key", ok), "status")
	if err == nil {
		t.Fatal("client with a foreign certificate got an answer")
	}
	if line := errorLine(err); !strings.Contains(line, "refused the client certificate") || !strings.Contains(line, "admin.tls.client_ca") {
		t.Errorf("a foreign client certificate reads %q; want it to say the certificate was refused and what must issue it", line)
	}

	// A CA bundle that does not hold the server's CA says so.
	_, _, err = cli(t, "/nonexistent.sock", "--server", cfg.Admin.TCPListen, "--tls-ca", writeFile(t, dir, "other-ca.pem", other.caPEM()), "--timeout", "3s",
		"--tls-cert", writeFile(t, dir, "cli2.pem", cliCert), "--tls-key", writeFile(t, dir, "cli2.key", cliKey), "status")
	if line := errorLine(err); err == nil || !strings.Contains(line, "not trusted") || !strings.Contains(line, "--tls-ca") {
		t.Errorf("a server of another CA reads %q (%v); want it to name --tls-ca", line, err)
	}
}

func poolOf(c *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c)
	return p
}

func TestConfigRefusesPlainTCP(t *testing.T) {
	cfg := appliance.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Admin.TCPListen = "127.0.0.1:9999"
	err := cfg.Finish()
	if err == nil || !strings.Contains(err.Error(), "admin.tcp_listen: needs admin.tls.cert") {
		t.Fatalf("finish() = %v; want admin.tcp_listen refused without TLS", err)
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// A stranger who reaches admin.tcp_listen holds nothing for long and
// nothing without bound: a connection that never completes its handshake
// is closed within the handshake timeout, and silent connections beyond
// the connection bound are not accepted (they cost the appliance no
// descriptor and no goroutine), so they cannot starve the boot path.
func TestAdminTCPBoundsStrangers(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	srvCert, srvKey := p.issue(t, "siteboot", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	cfg := testConfig(t)
	cfg.Admin.TCPListen = freePort(t)
	cfg.Admin.TLS.Cert = writeFile(t, dir, "srv.pem", srvCert)
	cfg.Admin.TLS.Key = writeFile(t, dir, "srv.key", srvKey)
	cfg.Admin.TLS.ClientCA = writeFile(t, dir, "ca.pem", p.caPEM())
	startAppliance(t, cfg)

	silent, err := net.Dial("tcp", cfg.Admin.TCPListen)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	_ = silent.SetReadDeadline(start.Add(admin.TLSHandshakeTimeout + 5*time.Second))
	if _, err := silent.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection without a handshake was kept open for %s", time.Since(start).Round(time.Second))
	}

	const strangers = 3 * admin.MaxTCPConns
	before := openFDs(t)
	for range strangers {
		c, err := net.Dial("tcp", cfg.Admin.TCPListen)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	time.Sleep(500 * time.Millisecond) // let the appliance accept what it will
	// The test holds the strangers' ends; the appliance at most
	// MaxTCPConns more (and a few of its own).
	if grown := openFDs(t) - before; grown > strangers+admin.MaxTCPConns+16 {
		t.Fatalf("%d silent connections opened %d descriptors; want at most %d", strangers, grown, strangers+admin.MaxTCPConns+16)
	}
}
