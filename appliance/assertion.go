package appliance

import (
	"context"
	"errors"
	"fmt"

	"github.com/siteboot/siteboot/discovery"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
)

// AssertionCheck is the verdict on one assertion text. Reason is empty
// when Valid; otherwise it is one of the discovery.Reason* strings and
// Detail says what failed. KeyID is set once the text decoded, Assertion
// once its signature verified.
type AssertionCheck struct {
	Valid          bool
	Reason, Detail string
	KeyID          string
	Assertion      *sitev1.DiscoveryAssertion
}

// VerifyAssertion checks text, exactly as it appears after bc.assertion= in
// a ramdisk script, against the public keys of the site's members (as
// /v1/keys serves them), or against jwks when it is not empty: signature,
// key id, expiry (now, this appliance's clock) and boot_lease_epoch ≥
// minEpoch. An assertion that fails a check is a result, not an error;
// the error is for a request that cannot be judged: jwks that is not a
// valid key set (*discovery.KeySetError), or an appliance still starting.
func (a *Appliance) VerifyAssertion(_ context.Context, text string, minEpoch uint64, jwks []byte) (AssertionCheck, error) {
	if err := a.started(); err != nil {
		return AssertionCheck{}, err
	}
	var keys *discovery.KeySet
	var err error
	if len(jwks) > 0 {
		keys, err = discovery.ParseJWKS(jwks)
	} else {
		keys, err = a.memberKeys()
	}
	if err != nil {
		return AssertionCheck{}, err
	}
	c := CheckAssertion(text, discovery.VerifyPolicy{Keys: keys, Now: a.now(), MinEpoch: minEpoch})
	if len(jwks) == 0 && c.Valid {
		a.checkSigner(&c)
	}
	return c, nil
}

// checkSigner refuses a valid assertion whose site_agent_node_id is not the
// member that published the signing key: any member's key verifies, so
// without this one member could vouch in another's name. A key set given
// as JWKS names no node ids, so only the member keys can be held to it.
func (a *Appliance) checkSigner(c *AssertionCheck) {
	publisher := ""
	if c.KeyID == a.signer.KID() {
		publisher = a.cfg.NodeID
	} else {
		for _, k := range a.node.Keys() {
			if k.KID == c.KeyID {
				publisher = k.NodeID
			}
		}
	}
	if claimed := c.Assertion.GetSiteAgentNodeId(); claimed != publisher {
		c.Valid, c.Reason = false, discovery.ReasonWrongSigner
		c.Detail = fmt.Sprintf("signed with the key %s published, but site_agent_node_id is %q", publisher, claimed)
	}
}

// CheckAssertion is discovery.VerifyAssertionText as a verdict, for every
// verifier (the appliance, the CLI with its own keys) to report alike.
func CheckAssertion(text string, p discovery.VerifyPolicy) AssertionCheck {
	c, err := discovery.VerifyAssertionText(text, p)
	out := AssertionCheck{Valid: err == nil, KeyID: c.KID, Assertion: c.Assertion}
	var ae *discovery.AssertionError
	switch {
	case errors.As(err, &ae):
		out.Reason, out.Detail = ae.Reason, ae.Detail
	case err != nil: // VerifyAssertionText refuses only with *AssertionError
		out.Reason, out.Detail = discovery.ReasonMalformed, err.Error()
	}
	return out
}
