package discovery

import (
	"crypto/ecdsa"
	"errors"
	"fmt"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/proto"
)

// MaxAssertionBody bounds the serialized DiscoveryAssertion VerifyAssertion
// accepts; a real one is a few hundred bytes.
const MaxAssertionBody = 4 << 10

// SignAssertion serializes a (deterministic protobuf encoding) and signs it:
// purpose "discovery-assertion", parts [body]. It checks nothing about the
// content; the caller checks the boot lease gate right before calling.
func (s *Signer) SignAssertion(a *sitev1.DiscoveryAssertion) (*sitev1.SignedDiscoveryAssertion, error) {
	if a == nil {
		return nil, errors.New("discovery: sign assertion: nil assertion")
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("discovery: sign assertion: %w", err)
	}
	sig, err := s.Sign(PurposeDiscoveryAssertion, body)
	if err != nil {
		return nil, err
	}
	return &sitev1.SignedDiscoveryAssertion{Body: body, Sig: sig}, nil
}

// VerifyAssertion checks sa's signature by pub and only then decodes the
// body. It checks the signature alone: whether issued_at, not_after and
// boot_lease_epoch are acceptable is the verifier's policy.
func VerifyAssertion(pub *ecdsa.PublicKey, sa *sitev1.SignedDiscoveryAssertion) (*sitev1.DiscoveryAssertion, error) {
	if sa == nil {
		return nil, errors.New("discovery: verify assertion: nil assertion")
	}
	if len(sa.GetBody()) > MaxAssertionBody {
		return nil, fmt.Errorf("discovery: verify assertion: body of %d bytes is larger than %d", len(sa.GetBody()), MaxAssertionBody)
	}
	if err := Verify(pub, sa.GetSig(), PurposeDiscoveryAssertion, sa.GetBody()); err != nil {
		return nil, err
	}
	a := &sitev1.DiscoveryAssertion{}
	if err := proto.Unmarshal(sa.GetBody(), a); err != nil {
		return nil, fmt.Errorf("discovery: verify assertion: signed body does not decode: %w", err)
	}
	return a, nil
}
