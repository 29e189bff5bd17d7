package admin

import (
	"context"

	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	"github.com/siteboot/siteboot/internal/relayerr"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The relays act on the site's machines and reach into its networks, so
// like every write they are admitted only for root or the admin group on
// the socket and for a verified client certificate over TCP; the allow-
// lists (bmc.networks, the spec's proxy_targets) bound what any admitted
// caller can reach.

// BmcOperation implements siteboot.v1.SiteBoot. A failed operation, a
// refused target included, is a result with ok false and its error_code;
// only a call the appliance cannot take is a gRPC error.
func (s *Server) BmcOperation(ctx context.Context, req *sitev1.BmcOperationRequest) (*sitev1.BmcOperationResult, error) {
	res, err := s.core.BmcOperation(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return res, nil
}

// HttpProxy implements siteboot.v1.SiteBoot. Any status the target
// answers is a response; a refused or failed request is a gRPC error
// carrying its relay code (see relayStatus).
func (s *Server) HttpProxy(ctx context.Context, req *sitev1.HttpProxyRequest) (*sitev1.HttpProxyResponse, error) {
	resp, err := s.core.HttpProxy(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

// ErrorDomain is the google.rpc.ErrorInfo domain of relay errors.
const ErrorDomain = "siteboot"

// relayCodes is the gRPC code of each relay code; the API's contract
// (siteboot.proto, HttpProxy) fixes the first eight. A code missing here
// is Internal.
var relayCodes = map[string]codes.Code{
	relayerr.ForbiddenTarget:        codes.PermissionDenied,
	relayerr.InvalidArgs:            codes.InvalidArgument,
	relayerr.Unreachable:            codes.Unavailable,
	relayerr.Timeout:                codes.DeadlineExceeded,
	relayerr.PinMismatch:            codes.FailedPrecondition,
	relayerr.TLSFailed:              codes.FailedPrecondition,
	relayerr.CredentialsUnavailable: codes.FailedPrecondition,
	relayerr.Busy:                   codes.ResourceExhausted,
	relayerr.Unsupported:            codes.Unimplemented,
	relayerr.AuthFailed:             codes.FailedPrecondition,
	relayerr.BMCError:               codes.FailedPrecondition,
	relayerr.Internal:               codes.Internal,
}

// relayStatus is a relay error as the API returns it: the code's gRPC
// code, the message "code: message", and a google.rpc.ErrorInfo whose
// reason is the code, for programs to switch on.
func relayStatus(e *relayerr.Error) error {
	code, ok := relayCodes[e.Code]
	if !ok {
		code = codes.Internal
	}
	st, err := status.New(code, e.Error()).WithDetails(&errdetails.ErrorInfo{Reason: e.Code, Domain: ErrorDomain})
	if err != nil { // only a detail that does not marshal; ErrorInfo always does
		return status.Error(code, e.Error())
	}
	return st.Err()
}
