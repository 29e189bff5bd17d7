package discovery

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
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

// signerWithKIDPrefix is a fresh signer whose key id starts with c: one
// key in 64 has any given first character, so a few hundred tries find one
// (the bound fails the test rather than loop: missing in 5,000 tries has a
// chance under 1e-34).
func signerWithKIDPrefix(t *testing.T, c byte) *Signer {
	t.Helper()
	for range 5000 {
		if s := newTestSigner(t); s.KID()[0] == c {
			return s
		}
	}
	t.Fatalf("no key id starting with %q in 5000 keys", c)
	return nil
}

// otherKID is kid with its first character replaced by a different one,
// so the result is never kid itself.
func otherKID(kid string) string {
	if kid[0] == 'A' {
		return "B" + kid[1:]
	}
	return "A" + kid[1:]
}

// TestVerifyTamper runs each tampering against a random key and against
// keys whose id starts with the characters the "wrong kid" case swaps in
// ('A', and 'x', which it swapped in before and which left one key in 64
// unchanged, so that its signature verified).
func TestVerifyTamper(t *testing.T) {
	for _, k := range []struct {
		name string
		s    *Signer
	}{
		{"random key", newTestSigner(t)},
		{"kid x", signerWithKIDPrefix(t, 'x')},
		{"kid A", signerWithKIDPrefix(t, 'A')},
	} {
		t.Run(k.name, func(t *testing.T) {
			t.Logf("kid %s", k.s.KID())
			verifyTamper(t, k.s)
		})
	}
}

func verifyTamper(t *testing.T, s *Signer) {
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
		{"wrong kid", "purpose-a", parts, &commonv1.Signature{Kid: otherKID(sig.GetKid()), Sig: sig.GetSig()}},
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

// TestVerifyQuotesLongKIDCut: the kid is the signer's choice; an error
// quotes at most maxQuotedKID bytes of it, not a megabyte into a log line.
func TestVerifyQuotesLongKIDCut(t *testing.T) {
	s := newTestSigner(t)
	sig, err := s.Sign("purpose-a", []byte("body"))
	if err != nil {
		t.Fatal(err)
	}
	kid := strings.Repeat("\x01", 1<<20)
	err = Verify(s.Public(), &commonv1.Signature{Kid: kid, Sig: sig.GetSig()}, "purpose-a", []byte("body"))
	if err == nil {
		t.Fatal("a signature with a foreign kid verified")
	}
	if n := len(err.Error()); n > 512 {
		t.Fatalf("error is %d bytes, want at most 512: the kid is quoted whole", n)
	}
	if !strings.Contains(err.Error(), "(1048576 bytes)") {
		t.Fatalf("error %q does not say how long the kid was", err)
	}
}

// TestKeyIDRefusesKeyWithoutPoint: a P-256 key with no coordinates is an
// error, not a panic inside the encoder.
func TestKeyIDRefusesKeyWithoutPoint(t *testing.T) {
	if _, err := KeyID(&ecdsa.PublicKey{Curve: elliptic.P256()}); err == nil {
		t.Fatal("KeyID of a key without a point succeeded")
	}
	s := newTestSigner(t)
	sig, err := s.Sign("p", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(&ecdsa.PublicKey{Curve: elliptic.P256()}, sig, "p", []byte("x")); err == nil {
		t.Fatal("Verify with a key without a point succeeded")
	}
}
