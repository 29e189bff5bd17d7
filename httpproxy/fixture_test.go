package httpproxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
	"github.com/siteboot/siteboot/secretref"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The loopback addresses of the fixture, all listening on the same port:
// Linux routes all of 127/8 to lo, so each is a machine of its own here.
const (
	ipAllowed = "127.0.0.1" // node-a, TLS server
	ipStray   = "127.0.0.2" // nobody's address
	ipOther   = "127.0.0.3" // node-b's address
	ipDenied  = "127.0.0.4" // node-a lists it, Config.Deny refuses it
	ipProv    = "127.0.0.5" // node-a, plain http, inside ProvisioningNetworks
	ipUnlist  = "127.0.0.6" // what nameonly.test resolves to; nobody lists it
)

var fixtureIPs = []string{ipAllowed, ipStray, ipOther, ipDenied, ipProv, ipUnlist}

// testDeny is DefaultDeny without 127.0.0.0/8 (the fixture lives there)
// and with ipDenied.
func testDeny() []netip.Prefix {
	var d []netip.Prefix
	for _, p := range DefaultDeny {
		if p != netip.MustParsePrefix("127.0.0.0/8") {
			d = append(d, p)
		}
	}
	return append(d, netip.MustParsePrefix(ipDenied+"/32"))
}

// spec is the allow-list of the fixture.
type spec struct{ s *sitev1.SiteSpec }

func (s spec) Spec() *sitev1.SiteSpec { return s.s }

func testSpec() spec {
	return spec{&sitev1.SiteSpec{ProxyTargets: []*sitev1.ProxyTarget{
		{NodeId: "node-a", Addresses: []string{
			ipAllowed, "allowed.test", "mixed.test", ipDenied, "denied.test", ipProv,
			"nameonly.test", "rebind.test", "Mapped.Test.", "wrongname.test", "zone.test",
			"0.0.0.0", "0x7f000002", "fe80::1%lo",
		}},
		{NodeId: "node-b", Addresses: []string{ipOther, "other.test"}},
	}}}
}

// resolver answers from a table and counts lookups; a name with several
// answers gives the next one at each lookup (the last one repeats).
type resolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	calls   map[string]int
}

func newResolver() *resolver {
	a := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	return &resolver{calls: map[string]int{}, answers: map[string][][]netip.Addr{
		"allowed.test":   {a(ipAllowed)},
		"mixed.test":     {a(ipAllowed, ipStray)},
		"denied.test":    {a(ipDenied)},
		"nameonly.test":  {a(ipUnlist)},
		"rebind.test":    {a(ipAllowed), a(ipStray)},
		"mapped.test":    {a("::ffff:" + ipAllowed)},
		"wrongname.test": {a(ipAllowed)},
		"zone.test":      {a("fe80::1%lo")},
		"other.test":     {a(ipOther)},
		"unlisted.test":  {a(ipAllowed)},
	}}
}

func (r *resolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if network != "ip" {
		return nil, fmt.Errorf("network %q", network)
	}
	n := r.calls[host]
	r.calls[host]++
	as, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return as[min(n, len(as)-1)], nil
}

func (r *resolver) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		n += c
	}
	return n
}

// countingListener records the remote address of every connection it
// accepts, so a test can tell that nothing reached it.
type countingListener struct {
	net.Listener
	mu        sync.Mutex
	remotes   []string
	sentinels map[string]bool
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.remotes = append(l.remotes, c.RemoteAddr().String())
		l.mu.Unlock()
	}
	return c, err
}

// settle returns how many connections other than the test's own sentinels
// the listener accepted. It dials a sentinel and waits until it was
// accepted: the accept queue is FIFO, so every connection made before it
// (by a Do that has returned) is counted by then.
func (l *countingListener) settle(t *testing.T) int {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("sentinel dial %s: %v", l.Addr(), err)
	}
	defer c.Close()
	me := c.LocalAddr().String()
	l.mu.Lock()
	l.sentinels[me] = true
	l.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		seen, n := false, 0
		for _, r := range l.remotes {
			if r == me {
				seen = true
			}
			if !l.sentinels[r] {
				n++
			}
		}
		l.mu.Unlock()
		if seen {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel to %s not accepted", l.Addr())
		}
		time.Sleep(time.Millisecond)
	}
}

// fixture is the loopback world of the tests: a TLS target, a plain http
// target in the provisioning network, and counting listeners on every
// other address, all on one port.
type fixture struct {
	port      int
	ca        *x509.CertPool
	spki      []byte // SHA-256 of the TLS target's SubjectPublicKeyInfo
	listeners map[string]*countingListener
	res       *resolver
	srv       *targetServer
	secrets   secretref.Resolver
	secretDir string
	logs      *syncBuffer
	reg       *prometheus.Registry
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{res: newResolver(), logs: &syncBuffer{}, reg: prometheus.NewRegistry()}
	cert, pool := testCert(t)
	f.ca = pool
	sum := sha256.Sum256(cert.Leaf.RawSubjectPublicKeyInfo)
	f.spki = sum[:]
	f.listen(t)
	f.srv = newTargetServer(f)
	quiet := log.New(io.Discard, "", 0)
	tlsSrv := &http.Server{Handler: f.srv, ErrorLog: quiet, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	plainSrv := &http.Server{Handler: f.srv, ErrorLog: quiet}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = tlsSrv.ServeTLS(f.listeners[ipAllowed], "", "") }()
	go func() { defer wg.Done(); _ = plainSrv.Serve(f.listeners[ipProv]) }()
	for _, ip := range []string{ipStray, ipOther, ipDenied, ipUnlist} {
		wg.Add(1)
		go func(l net.Listener) { defer wg.Done(); acceptAndClose(l) }(f.listeners[ip])
	}
	t.Cleanup(func() {
		f.srv.stop()
		tlsSrv.Close()
		plainSrv.Close()
		for _, l := range f.listeners {
			l.Close()
		}
		wg.Wait()
	})
	f.secretDir = t.TempDir()
	f.secrets = secretref.Resolver{Policy: secretref.Policy{Dir: f.secretDir}}
	return f
}

// listen binds every fixture address on one port, retrying with a new
// port when one of them is taken.
func (f *fixture) listen(t *testing.T) {
	for attempt := 0; attempt < 20; attempt++ {
		first, err := net.Listen("tcp", ipAllowed+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		ls := map[string]*countingListener{ipAllowed: {Listener: first, sentinels: map[string]bool{}}}
		ok := true
		for _, ip := range fixtureIPs[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			ls[ip] = &countingListener{Listener: l, sentinels: map[string]bool{}}
		}
		if ok {
			f.port, f.listeners = port, ls
			return
		}
		for _, l := range ls {
			l.Close()
		}
	}
	t.Fatal("no port free on every fixture address")
}

func acceptAndClose(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// counts settles every listener.
func (f *fixture) counts(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for ip, l := range f.listeners {
		out[ip] = l.settle(t)
	}
	return out
}

// u fills in {P} (the fixture port) in a URL template.
func (f *fixture) u(tmpl string) string {
	return strings.ReplaceAll(tmpl, "{P}", strconv.Itoa(f.port))
}

// config is the Config of the tests: the fixture's allow-list, deny list
// and resolver; mod changes it.
func (f *fixture) config(mod func(*Config)) Config {
	cfg := Config{
		Targets:              testSpec(),
		ProvisioningNetworks: []netip.Prefix{netip.MustParsePrefix(ipProv + "/32")},
		Deny:                 testDeny(),
		MaxResponseBytes:     64 << 10,
		Timeout:              10 * time.Second,
		Resolver:             f.res,
		Secrets:              f.secrets,
		Logger:               slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer:           f.reg,
		RootCAs:              f.ca,
	}
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

func (f *fixture) proxy(t *testing.T, mod func(*Config)) *Proxy {
	t.Helper()
	p, err := New(f.config(mod))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// secret writes a secret file and returns its ref.
func (f *fixture) secret(t *testing.T, name, value string) string {
	t.Helper()
	p := filepath.Join(f.secretDir, name)
	if err := os.WriteFile(p, []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
	return "file://" + p
}

// testCert makes a CA and a leaf for allowed.test, rebind.test,
// mapped.test and 127.0.0.1 (not wrongname.test).
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "httpproxy test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "allowed.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames:    []string{"allowed.test", "rebind.test", "mapped.test"},
		IPAddresses: []net.IP{net.ParseIP(ipAllowed)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// wantCode fails unless err is a *relayerr.Error with code.
func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var re *relayerr.Error
	if !errors.As(err, &re) || re.Code != code {
		t.Fatalf("err = %v, want a *relayerr.Error with code %s", err, code)
	}
}
