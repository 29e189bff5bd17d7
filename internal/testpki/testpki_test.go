package testpki

import (
	"crypto/x509"
	"net"
	"testing"
	"time"
)

// A leaf verifies against its CA for its usages and names, and not against
// another CA; an expired one does not verify.
func TestIssue(t *testing.T) {
	ca, other := NewCA(t, "site"), NewCA(t, "other")
	verify := func(pool *CA, l Leaf, usage x509.ExtKeyUsage) error {
		kp := ca.KeyPair(t, "n1", l)
		cert, err := x509.ParseCertificate(kp.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pool.PEM)
		_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, CurrentTime: time.Now()})
		return err
	}
	loop := Leaf{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	if err := verify(ca, loop, x509.ExtKeyUsageServerAuth); err != nil {
		t.Fatalf("server leaf: %v", err)
	}
	if err := verify(ca, loop, x509.ExtKeyUsageClientAuth); err != nil {
		t.Fatalf("client use of the default leaf: %v", err)
	}
	if err := verify(other, loop, x509.ExtKeyUsageServerAuth); err == nil {
		t.Fatal("a leaf verified against another CA")
	}
	if err := verify(ca, Leaf{Expired: true}, x509.ExtKeyUsageServerAuth); err == nil {
		t.Fatal("an expired leaf verified")
	}
	if err := verify(ca, Leaf{Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, x509.ExtKeyUsageServerAuth); err == nil {
		t.Fatal("a client-only leaf verified for server auth")
	}
}
