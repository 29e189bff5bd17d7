package discovery

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"

	commonv1 "github.com/siteboot/siteboot/gen/bettercompute/common/v1"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/proto"
)

func newTestSigner(t testing.TB) *Signer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyAssertionTamper(t *testing.T) {
	s := newTestSigner(t)
	other := newTestSigner(t)
	good, err := s.SignAssertion(vectorAssertion())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyAssertion(s.Public(), good); err != nil {
		t.Fatalf("untampered assertion: %v", err)
	}
	tests := []struct {
		name   string
		pub    *ecdsa.PublicKey
		tamper func(sa *sitev1.SignedDiscoveryAssertion)
	}{
		{"body byte flipped", s.Public(), func(sa *sitev1.SignedDiscoveryAssertion) { sa.Body[len(sa.Body)/2] ^= 0x01 }},
		{"body extended", s.Public(), func(sa *sitev1.SignedDiscoveryAssertion) { sa.Body = append(sa.Body, 0x18, 0x08) }},
		{"sig byte flipped", s.Public(), func(sa *sitev1.SignedDiscoveryAssertion) { sa.Sig.Sig[5] ^= 0x80 }},
		{"sig short", s.Public(), func(sa *sitev1.SignedDiscoveryAssertion) { sa.Sig.Sig = sa.Sig.Sig[:63] }},
		{"sig zero", s.Public(), func(sa *sitev1.SignedDiscoveryAssertion) { sa.Sig.Sig = make([]byte, 64) }},
		{"sig missing", s.Public(), func(sa *sitev1.SignedDiscoveryAssertion) { sa.Sig = nil }},
		{"wrong kid", s.Public(), func(sa *sitev1.SignedDiscoveryAssertion) { sa.Sig.Kid = other.KID() }},
		{"other key, its kid", other.Public(), func(sa *sitev1.SignedDiscoveryAssertion) { sa.Sig.Kid = other.KID() }},
		{"other key, our kid", other.Public(), func(*sitev1.SignedDiscoveryAssertion) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sa := proto.CloneOf(good)
			tt.tamper(sa)
			if a, err := VerifyAssertion(tt.pub, sa); err == nil {
				t.Fatalf("tampered assertion verified: %v", a)
			}
		})
	}
}

func TestVerifyTamper(t *testing.T) {
	s := newTestSigner(t)
	parts := [][]byte{[]byte("body"), []byte("more")}
	sig, err := s.Sign("purpose-a", parts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(s.Public(), sig, "purpose-a", parts...); err != nil {
		t.Fatalf("untampered: %v", err)
	}
	tests := []struct {
		name    string
		purpose string
		parts   [][]byte
		sig     *commonv1.Signature
	}{
		{"wrong purpose", "purpose-b", parts, sig},
		{"purpose prefix", "purpose", parts, sig},
		{"part boundary moved", "purpose-a", [][]byte{[]byte("bod"), []byte("ymore")}, sig},
		{"part dropped", "purpose-a", parts[:1], sig},
		{"part added", "purpose-a", append(append([][]byte{}, parts...), nil), sig},
		{"wrong kid", "purpose-a", parts, &commonv1.Signature{Kid: "x" + sig.GetKid()[1:], Sig: sig.GetSig()}},
		{"nil signature", "purpose-a", parts, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Verify(s.Public(), tt.sig, tt.purpose, tt.parts...); err == nil {
				t.Fatal("verified")
			}
		})
	}
}

func TestNewSignerRefusesOtherCurves(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewSigner(key); err == nil {
		t.Fatal("P-384 key accepted")
	}
	if _, err := KeyID(&key.PublicKey); err == nil {
		t.Fatal("KeyID of a P-384 key succeeded")
	}
}

func TestParsePublicKeyPEMRoundTrip(t *testing.T) {
	s := newTestSigner(t)
	pub, err := ParsePublicKeyPEM(s.PublicKeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(s.Public()) {
		t.Fatal("parsed key differs")
	}
	if _, err := ParsePublicKeyPEM([]byte("not pem")); err == nil {
		t.Fatal("garbage accepted")
	}
}
