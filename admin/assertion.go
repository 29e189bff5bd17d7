package admin

import (
	"context"

	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
)

// VerifyAssertion implements siteboot.v1.SiteBoot. It is a read: any caller
// the listener admits may ask. An assertion that fails a check is a
// response with valid false and the reason; only a request that cannot be
// judged (jwks that is not a key set, an appliance still starting) is an
// error.
func (s *Server) VerifyAssertion(ctx context.Context, req *sitebootv1.VerifyAssertionRequest) (*sitebootv1.VerifyAssertionResponse, error) {
	c, err := s.core.VerifyAssertion(ctx, req.GetAssertion(), req.GetMinEpoch(), req.GetJwks())
	if err != nil {
		return nil, grpcError(err)
	}
	resp := &sitebootv1.VerifyAssertionResponse{Valid: c.Valid, Assertion: c.Assertion, KeyId: c.KeyID}
	if !c.Valid {
		resp.Reason = c.Reason + ": " + c.Detail
	}
	return resp, nil
}
