package discovery

import (
	"bytes"
	"fmt"
	"time"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"google.golang.org/protobuf/proto"
)

// MaxAssertionText bounds the bc.assertion= text VerifyAssertionText
// decodes: the base64url of a SignedDiscoveryAssertion whose body is at
// most MaxAssertionBody, with its signature.
const MaxAssertionText = (MaxAssertionBody + 512) * 4 / 3

// MaxClockSkew is how far in the future issued_at may lie, to allow for the
// signer's and the verifier's clocks disagreeing a little.
const MaxClockSkew = time.Minute

// The Reasons of an AssertionError: short, fixed strings, safe to print,
// count and branch on.
const (
	ReasonMalformed    = "malformed"     // not the text an appliance writes after bc.assertion=
	ReasonUnknownKey   = "unknown-key"   // its kid is in none of the keys given
	ReasonBadSignature = "bad-signature" // the named key did not sign these bytes
	ReasonExpired      = "expired"       // now is not before not_after
	ReasonNotYetValid  = "not-yet-valid" // issued_at is in the future beyond MaxClockSkew
	ReasonStaleEpoch   = "stale-epoch"   // boot_lease_epoch is below the minimum asked for
	ReasonWrongSigner  = "wrong-signer"  // site_agent_node_id names another member than the one that published the key
)

// AssertionError is an assertion VerifyAssertionText refused. Reason is
// one of the Reason constants; Detail says exactly what failed.
type AssertionError struct {
	Reason string
	Detail string
}

func (e *AssertionError) Error() string {
	return "discovery: assertion refused: " + e.Reason + ": " + e.Detail
}

func refuse(reason, format string, args ...any) *AssertionError {
	return &AssertionError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// VerifyPolicy is what VerifyAssertionText holds an assertion to besides
// its signature.
type VerifyPolicy struct {
	// Keys are the keys an assertion may be signed by (the site members').
	Keys *KeySet
	// Now is the time expiry is judged at (required).
	Now time.Time
	// MinEpoch refuses an assertion whose boot_lease_epoch is lower.
	MinEpoch uint64
}

// Checked is what VerifyAssertionText learned about an assertion. KID is
// set once the text decoded; Assertion once its signature verified, also
// when the assertion was refused afterwards (expired, stale epoch), so a
// caller can show what it says.
type Checked struct {
	KID       string
	Assertion *sitev1.DiscoveryAssertion
}

// VerifyAssertionText checks text, exactly as an appliance writes it after
// bc.assertion= in a ramdisk script: unpadded base64url (the only spelling
// of the bytes it accepts) of the deterministic protobuf encoding of a
// SignedDiscoveryAssertion, at most MaxAssertionText bytes. Its kid must
// name a key of p.Keys, that key's signature must verify (VerifyAssertion),
// now must be before not_after, issued_at no later than now+MaxClockSkew,
// and boot_lease_epoch at least p.MinEpoch. Every refusal is an
// *AssertionError.
func VerifyAssertionText(text string, p VerifyPolicy) (Checked, error) {
	var c Checked
	sa, err := decodeAssertionText(text)
	if err != nil {
		return c, err
	}
	c.KID = sa.GetSig().GetKid()
	pub, ok := p.Keys.Lookup(c.KID)
	if !ok {
		return c, refuse(ReasonUnknownKey, "kid %s is not among the %d keys given", quoteKID(c.KID), len(p.Keys.KIDs()))
	}
	a, err := VerifyAssertion(pub, sa)
	if err != nil {
		return c, refuse(ReasonBadSignature, "%v", err)
	}
	c.Assertion = a
	return c, checkPolicy(a, p)
}

// decodeAssertionText decodes the text into a SignedDiscoveryAssertion and
// checks it is the canonical encoding of one with a body and a signature.
func decodeAssertionText(text string) (*sitev1.SignedDiscoveryAssertion, error) {
	if len(text) == 0 {
		return nil, refuse(ReasonMalformed, "empty")
	}
	if len(text) > MaxAssertionText {
		return nil, refuse(ReasonMalformed, "%d bytes is longer than %d", len(text), MaxAssertionText)
	}
	wire, err := decodeB64URL(text)
	if err != nil {
		return nil, refuse(ReasonMalformed, "not unpadded base64url: %v", err)
	}
	sa := &sitev1.SignedDiscoveryAssertion{}
	if err := proto.Unmarshal(wire, sa); err != nil {
		return nil, refuse(ReasonMalformed, "not a SignedDiscoveryAssertion: %v", err)
	}
	switch {
	case len(sa.GetBody()) == 0:
		return nil, refuse(ReasonMalformed, "no body")
	case len(sa.GetBody()) > MaxAssertionBody:
		return nil, refuse(ReasonMalformed, "body of %d bytes is larger than %d", len(sa.GetBody()), MaxAssertionBody)
	case sa.GetSig() == nil:
		return nil, refuse(ReasonMalformed, "no signature")
	case len(sa.GetSig().GetChain()) > 0:
		return nil, refuse(ReasonMalformed, "a certificate chain (an appliance's assertion names its key by kid alone)")
	case len(sa.ProtoReflect().GetUnknown()) > 0 || len(sa.GetSig().ProtoReflect().GetUnknown()) > 0:
		return nil, refuse(ReasonMalformed, "unknown fields")
	}
	again, err := proto.MarshalOptions{Deterministic: true}.Marshal(sa)
	if err != nil || !bytes.Equal(again, wire) {
		return nil, refuse(ReasonMalformed, "not the deterministic encoding an appliance writes")
	}
	return sa, nil
}

func checkPolicy(a *sitev1.DiscoveryAssertion, p VerifyPolicy) error {
	if a.GetNotAfter() == nil || a.GetIssuedAt() == nil {
		return refuse(ReasonMalformed, "issued_at and not_after are required")
	}
	issued, notAfter := a.GetIssuedAt().AsTime(), a.GetNotAfter().AsTime()
	switch {
	case !p.Now.Before(notAfter):
		return refuse(ReasonExpired, "not_after %s is not after now (%s)", notAfter.Format(time.RFC3339), p.Now.UTC().Format(time.RFC3339))
	case issued.After(p.Now.Add(MaxClockSkew)):
		return refuse(ReasonNotYetValid, "issued_at %s is more than %s after now (%s)", issued.Format(time.RFC3339), MaxClockSkew, p.Now.UTC().Format(time.RFC3339))
	case a.GetBootLeaseEpoch() < p.MinEpoch:
		return refuse(ReasonStaleEpoch, "boot_lease_epoch %d is below the minimum %d", a.GetBootLeaseEpoch(), p.MinEpoch)
	}
	return nil
}
