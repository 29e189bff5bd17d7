package lease

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/siteboot/siteboot/internal/testpki"
)

// testCA is a throwaway certificate authority whose leaves are appliance
// certificates for 127.0.0.1.
type testCA struct{ *testpki.CA }

func newTestCA(t *testing.T, name string) *testCA { return &testCA{testpki.NewCA(t, name)} }

// leafOpts shape a leaf certificate; the zero value is a valid appliance
// certificate for 127.0.0.1.
type leafOpts struct {
	usages  []x509.ExtKeyUsage // default: server and client auth
	expired bool
}

func (o leafOpts) leaf() testpki.Leaf {
	return testpki.Leaf{Usages: o.usages, Expired: o.expired, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
}

// files writes the CA and a fresh leaf for cn into a temp dir.
func (ca *testCA) files(t *testing.T, cn string, o leafOpts) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	c, k := ca.Issue(t, cn, o.leaf())
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	for path, data := range map[string][]byte{f.CA: ca.PEM, f.Cert: c, f.Key: k} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// keyPair is a leaf as a tls.Certificate, for hand-made clients.
func (ca *testCA) keyPair(t *testing.T, cn string, o leafOpts) tls.Certificate {
	t.Helper()
	return ca.KeyPair(t, cn, o.leaf())
}
