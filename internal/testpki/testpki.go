// Package testpki issues throwaway certificates for tests of the TLS
// listeners (the admin API, the raft transport): a P-256 CA and leaves it
// signs, as PEM, valid for an hour around now unless asked otherwise.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority for one test.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is Cert, PEM-encoded: the bundle a listener trusts.
	PEM []byte
}

var serial atomic.Int64

// NewCA returns a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, PEM: pemOf("CERTIFICATE", der)}
}

// Leaf shapes a leaf certificate.
type Leaf struct {
	// Usages default to server and client auth.
	Usages []x509.ExtKeyUsage
	// IPs are the addresses the certificate names (none by default).
	IPs []net.IP
	// Expired makes a certificate that ended a minute ago.
	Expired bool
}

// Issue returns the PEM certificate and PKCS #8 key of a leaf named cn.
func (ca *CA) Issue(t testing.TB, cn string, l Leaf) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	usages := l.Usages
	if usages == nil {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	notAfter := time.Now().Add(time.Hour)
	if l.Expired {
		notAfter = time.Now().Add(-time.Minute)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usages, IPAddresses: l.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemOf("CERTIFICATE", der), pemOf("PRIVATE KEY", kd)
}

// KeyPair is Issue as a tls.Certificate, for hand-made clients.
func (ca *CA) KeyPair(t testing.TB, cn string, l Leaf) tls.Certificate {
	t.Helper()
	c, k := ca.Issue(t, cn, l)
	kp, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func pemOf(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
