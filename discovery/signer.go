package discovery

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"

	commonv1 "github.com/siteboot/siteboot/gen/bettercompute/common/v1"
)

// sigLen is the length of an ES256 signature in the r‖s (IEEE P1363) layout.
const sigLen = 64

// Signer signs with this appliance's node key (ECDSA P-256). It is safe
// for concurrent use.
type Signer struct {
	key    *ecdsa.PrivateKey
	kid    string
	pubPEM []byte
}

// NewSigner wraps a P-256 private key. Most callers want LoadOrCreateKey;
// this is for keys held elsewhere (and test vectors).
func NewSigner(key *ecdsa.PrivateKey) (*Signer, error) {
	if key == nil || key.Curve != elliptic.P256() {
		return nil, errors.New("discovery: the node key must be an ECDSA P-256 key")
	}
	kid, err := KeyID(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("discovery: encode public key: %w", err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: spki})
	return &Signer{key: key, kid: kid, pubPEM: pubPEM}, nil
}

// KeyID returns the kid of a P-256 public key: base64url without padding
// of SHA-256 over its SubjectPublicKeyInfo DER.
func KeyID(pub *ecdsa.PublicKey) (string, error) {
	if pub == nil || pub.Curve != elliptic.P256() || pub.X == nil || pub.Y == nil {
		return "", errors.New("discovery: key id: not an ECDSA P-256 public key")
	}
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("discovery: key id: %w", err)
	}
	sum := sha256.Sum256(spki)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// KID returns the key id that Signatures made by s carry.
func (s *Signer) KID() string { return s.kid }

// Public returns the public half of the node key.
func (s *Signer) Public() *ecdsa.PublicKey { return &s.key.PublicKey }

// PublicKeyPEM returns the public key as a PEM "PUBLIC KEY" block
// (SubjectPublicKeyInfo), for verifiers that must not trust the channel an
// assertion came by.
func (s *Signer) PublicKeyPEM() []byte { return append([]byte(nil), s.pubPEM...) }

// Sign signs SigningMessage(purpose, parts...) with ES256.
func (s *Signer) Sign(purpose string, parts ...[]byte) (*commonv1.Signature, error) {
	msg, err := SigningMessage(purpose, parts...)
	if err != nil {
		return nil, err
	}
	digest := sha256.Sum256(msg)
	r, ss, err := ecdsa.Sign(rand.Reader, s.key, digest[:])
	if err != nil {
		return nil, fmt.Errorf("discovery: sign %s: %w", purpose, err)
	}
	sig := make([]byte, sigLen)
	r.FillBytes(sig[:sigLen/2])
	ss.FillBytes(sig[sigLen/2:])
	return &commonv1.Signature{Kid: s.kid, Sig: sig}, nil
}

// Verify checks that sig is pub's ES256 signature over
// SigningMessage(purpose, parts...): the kid must name pub and the
// signature must be 64 bytes of r‖s.
func Verify(pub *ecdsa.PublicKey, sig *commonv1.Signature, purpose string, parts ...[]byte) error {
	kid, err := KeyID(pub)
	if err != nil {
		return err
	}
	if sig == nil {
		return errors.New("discovery: verify: no signature")
	}
	if sig.GetKid() != kid {
		return fmt.Errorf("discovery: verify: signature kid %s is not the key's %q", quoteKID(sig.GetKid()), kid)
	}
	if len(sig.GetSig()) != sigLen {
		return fmt.Errorf("discovery: verify: signature is %d bytes, want %d (r‖s)", len(sig.GetSig()), sigLen)
	}
	msg, err := SigningMessage(purpose, parts...)
	if err != nil {
		return err
	}
	digest := sha256.Sum256(msg)
	r := new(big.Int).SetBytes(sig.GetSig()[:sigLen/2])
	s := new(big.Int).SetBytes(sig.GetSig()[sigLen/2:])
	if !ecdsa.Verify(pub, digest[:], r, s) {
		return fmt.Errorf("discovery: verify: bad %s signature by %s", purpose, kid)
	}
	return nil
}

// maxQuotedKID is the most of a kid an error quotes: a real one is 43
// bytes; the signer of a message chooses the kid it carries, and an error
// ends up in logs.
const maxQuotedKID = 64

// quoteKID quotes kid for an error, cut to maxQuotedKID bytes with its
// length said when longer.
func quoteKID(kid string) string {
	if len(kid) <= maxQuotedKID {
		return fmt.Sprintf("%q", kid)
	}
	return fmt.Sprintf("%q… (%d bytes)", kid[:maxQuotedKID], len(kid))
}

// ParsePublicKeyPEM reads a PEM "PUBLIC KEY" block (what PublicKeyPEM
// writes) holding a P-256 key.
func ParsePublicKeyPEM(data []byte) (*ecdsa.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, errors.New("discovery: no PEM PUBLIC KEY block")
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("discovery: public key: %w", err)
	}
	pub, ok := k.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, errors.New("discovery: public key is not ECDSA P-256")
	}
	return pub, nil
}
