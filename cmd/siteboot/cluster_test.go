package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/siteboot/siteboot/internal/testpki"
	"github.com/siteboot/siteboot/lease"
	"github.com/siteboot/siteboot/site"
)

// TestClusterMembersCLI: members lists the single voter of a standalone
// appliance with the index it was read at; join and leave are refused
// with FailedPrecondition there and change nothing.
func TestClusterMembersCLI(t *testing.T) {
	a := startAppliance(t, testConfig(t))
	sock := a.cfg.Admin.Socket
	out := mustCLI(t, sock, "cluster", "members")
	for _, want := range []string{"ADDRESS", "SUFFRAGE", "appliance-test", "Voter", "yes", "applied index"} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster members lacks %q:\n%s", want, out)
		}
	}
	var got struct {
		Members []struct {
			ServerID string `json:"serverId"`
			Suffrage string `json:"suffrage"`
			Leader   bool   `json:"leader"`
		} `json:"members"`
		AppliedIndex string `json:"appliedIndex"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, sock, "cluster", "members", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Members) != 1 || got.Members[0].ServerID != "appliance-test" || !got.Members[0].Leader ||
		got.Members[0].Suffrage != "Voter" || got.AppliedIndex == "" || got.AppliedIndex == "0" {
		t.Fatalf("cluster members -o json = %+v", got)
	}
	for _, args := range [][]string{{"join", "127.0.0.1:7390"}, {"leave", "127.0.0.1:7390"}} {
		_, _, err := cli(t, sock, append([]string{"cluster"}, args...)...)
		if err == nil || !strings.Contains(errorLine(err), "lease.mode cluster") || !strings.Contains(errorLine(err), "FailedPrecondition") {
			t.Errorf("cluster %s in standalone mode = %v; want FailedPrecondition naming lease.mode cluster", args[0], err)
		}
	}
	if n := strings.Count(mustCLI(t, sock, "cluster", "members"), "Voter"); n != 1 {
		t.Fatalf("%d voters after refused changes; want 1", n)
	}
}

// runPKI runs a file-only cluster command; no appliance is dialed.
func runPKI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, _, err := cli(t, filepath.Join(t.TempDir(), "none.sock"), append([]string{"cluster"}, args...)...)
	return out, err
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s holds no PEM", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClusterInitCAAndIssueCert: the files init-ca and issue-cert write,
// their modes, their contents, and that neither overwrites anything.
func TestClusterInitCAAndIssueCert(t *testing.T) {
	caDir := filepath.Join(t.TempDir(), "ca")
	if _, err := runPKI(t, "init-ca", caDir); err != nil {
		t.Fatal(errorLine(err))
	}
	if m := mode(t, filepath.Join(caDir, "ca.key")); m != 0o600 {
		t.Errorf("ca.key mode %o; want 600", m)
	}
	before, _ := os.ReadFile(filepath.Join(caDir, "ca.key"))
	if _, err := runPKI(t, "init-ca", caDir); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("init-ca over an existing CA = %v; want refused", err)
	}
	if after, _ := os.ReadFile(filepath.Join(caDir, "ca.key")); string(after) != string(before) {
		t.Fatal("the refused init-ca changed ca.key")
	}
	ca := readCert(t, filepath.Join(caDir, "ca.pem"))
	if !ca.IsCA || ca.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("CA certificate: IsCA %t, key %v", ca.IsCA, ca.PublicKeyAlgorithm)
	}

	out := filepath.Join(t.TempDir(), "n1")
	if _, err := runPKI(t, "issue-cert", "appliance-1", "--address", "10.0.0.1:7390", "--ca", caDir, "--out", out); err != nil {
		t.Fatal(errorLine(err))
	}
	if m := mode(t, filepath.Join(out, "key.pem")); m != 0o600 {
		t.Errorf("key.pem mode %o; want 600", m)
	}
	leaf := readCert(t, filepath.Join(out, "cert.pem"))
	if leaf.Subject.CommonName != "appliance-1" || len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.IPv4(10, 0, 0, 1)) ||
		!slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Fatalf("leaf: CN %q, IPs %v, EKU %v", leaf.Subject.CommonName, leaf.IPAddresses, leaf.ExtKeyUsage)
	}
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("leaf not signed by the CA: %v", err)
	}
	dns := filepath.Join(t.TempDir(), "n2")
	if _, err := runPKI(t, "issue-cert", "appliance-2", "--address", "boot-2.site.example:7390", "--ca", caDir, "--out", dns); err != nil {
		t.Fatal(errorLine(err))
	}
	if l := readCert(t, filepath.Join(dns, "cert.pem")); !slices.Equal(l.DNSNames, []string{"boot-2.site.example"}) || len(l.IPAddresses) != 0 {
		t.Fatalf("DNS leaf: DNS %v, IPs %v", l.DNSNames, l.IPAddresses)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"issue-cert", "appliance-1", "--address", "10.0.0.1:7390", "--ca", caDir, "--out", out}, "refusing to overwrite"},
		{[]string{"issue-cert", "bad node", "--address", "10.0.0.1:7390", "--ca", caDir, "--out", t.TempDir()}, "NODE"},
		{[]string{"issue-cert", "n", "--address", "10.0.0.1", "--ca", caDir, "--out", t.TempDir()}, "--address"},
		{[]string{"issue-cert", "n", "--address", "0.0.0.0:7390", "--ca", caDir, "--out", t.TempDir()}, "--address"},
		{[]string{"issue-cert", "n", "--address", "10.0.0.1:7390", "--ca", t.TempDir(), "--out", t.TempDir()}, "--ca"},
		{[]string{"issue-cert", "n", "--ca", caDir, "--out", t.TempDir()}, "address"},
	} {
		if _, err := runPKI(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cluster %s = %v; want an error naming %s", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(out, "key.pem")); len(after) == 0 {
		t.Fatal("the refused issue-cert damaged key.pem")
	}
}

// raftClient is raft's own transport dialing over TLS with cert, trusting
// any server, so only the server can refuse it.
func raftClient(t *testing.T, cert tls.Certificate) raft.Transport {
	t.Helper()
	d := &tlsDialer{conf: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}},
		done: make(chan struct{})}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: d, MaxPool: 1, Timeout: 2 * time.Second,
		Logger: hclog.NewNullLogger()})
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

type tlsDialer struct {
	conf *tls.Config
	done chan struct{}
}

func (d *tlsDialer) Dial(a raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(a), d.conf)
}
func (d *tlsDialer) Accept() (net.Conn, error) { <-d.done; return nil, net.ErrClosed }
func (d *tlsDialer) Close() error {
	select {
	case <-d.done:
	default:
		close(d.done)
	}
	return nil
}
func (d *tlsDialer) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func issued(t *testing.T, caDir, node, addr string) lease.TLSFiles {
	t.Helper()
	out := filepath.Join(t.TempDir(), node)
	if _, err := runPKI(t, "issue-cert", node, "--address", addr, "--ca", caDir, "--out", out); err != nil {
		t.Fatal(errorLine(err))
	}
	return lease.TLSFiles{CA: filepath.Join(out, "ca.pem"), Cert: filepath.Join(out, "cert.pem"), Key: filepath.Join(out, "key.pem")}
}

// TestIssuedCertsWorkOnTheRaftPort: a raft node runs with the files
// issue-cert wrote, a peer with another certificate of the same CA gets
// raft answers from it, and a peer whose certificate another CA issued is
// refused, as is a node configured with such a certificate.
func TestIssuedCertsWorkOnTheRaftPort(t *testing.T) {
	caDir := filepath.Join(t.TempDir(), "ca")
	if _, err := runPKI(t, "init-ca", caDir); err != nil {
		t.Fatal(errorLine(err))
	}
	addr := freePort(t)
	files := issued(t, caDir, "appliance-1", addr)
	if err := lease.CheckTransport(addr, files); err != nil {
		t.Fatalf("CheckTransport: %v", err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := lease.Open(lease.Config{Dir: t.TempDir(), ID: "appliance-1", Bind: addr, TLS: files, StateMachine: site.NewState(), Logger: log})
	if err != nil {
		t.Fatalf("Open with issued certificates: %v", err)
	}
	defer n.Close()

	peerFiles := issued(t, caDir, "appliance-2", "127.0.0.2:7390")
	peer, err := tls.LoadX509KeyPair(peerFiles.Cert, peerFiles.Key)
	if err != nil {
		t.Fatal(err)
	}
	var resp raft.RequestVoteResponse
	req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("appliance-2"), Addr: []byte("127.0.0.2:7390")}, Term: 0}
	if err := raftClient(t, peer).RequestVote("appliance-1", raft.ServerAddress(addr), req, &resp); err != nil {
		t.Fatalf("a peer with an issued certificate got no raft answer: %v", err)
	}
	if resp.Granted {
		t.Fatal("a stale vote request was granted")
	}

	other := testpki.NewCA(t, "another ca")
	foreign := other.KeyPair(t, "appliance-3", testpki.Leaf{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	err = raftClient(t, foreign).RequestVote("appliance-1", raft.ServerAddress(addr), req, &resp)
	if err == nil {
		t.Fatal("a peer of another CA got a raft answer")
	}

	// A node configured with a certificate of another CA does not start.
	bad := files
	dir := t.TempDir()
	c, k := other.Issue(t, "appliance-4", testpki.Leaf{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	bad.Cert, bad.Key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for p, data := range map[string][]byte{bad.Cert: c, bad.Key: k} {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err = lease.Open(lease.Config{Dir: t.TempDir(), ID: "appliance-4", Bind: freePort(t), TLS: bad, StateMachine: site.NewState(), Logger: log})
	var te *lease.TransportError
	if !errors.As(err, &te) || te.Field != "tls.cert" {
		t.Fatalf("Open with another CA's certificate = %v; want a tls.cert TransportError", err)
	}
}
