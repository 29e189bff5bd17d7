package admin

import (
	"context"
	"errors"
	"reflect"

	"github.com/siteboot/siteboot/appliance"
	"github.com/siteboot/siteboot/discovery"
	"github.com/siteboot/siteboot/imagecache"
	"github.com/siteboot/siteboot/internal/relayerr"
	"github.com/siteboot/siteboot/ipxe"
	"github.com/siteboot/siteboot/lease"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// codeRule maps the errors that match one domain error to a gRPC code: a
// sentinel matched with errors.Is, or an error type matched with errors.As.
type codeRule struct {
	is   error
	as   reflect.Type
	code codes.Code
}

func (r codeRule) matches(err error) bool {
	if r.is != nil {
		return errors.Is(err, r.is)
	}
	return errors.As(err, reflect.New(r.as).Interface())
}

func is(sentinel error, code codes.Code) codeRule { return codeRule{is: sentinel, code: code} }

func as[T error](code codes.Code) codeRule {
	return codeRule{as: reflect.TypeFor[T](), code: code}
}

// codeTable is the one place that chooses the gRPC code of a domain error.
// Rules are tried in order; an error no rule matches is Internal.
var codeTable = []codeRule{
	// The request is wrong: fixing it is the caller's job.
	as[*site.FieldError](codes.InvalidArgument),
	as[*ipxe.RequestError](codes.InvalidArgument),
	as[*discovery.KeySetError](codes.InvalidArgument),
	as[*lease.AddressError](codes.InvalidArgument),
	as[*lease.UpdateError](codes.InvalidArgument),
	// The request is fine but the state does not allow it now.
	as[*site.ConflictError](codes.FailedPrecondition),
	as[*site.NotReadyError](codes.FailedPrecondition),
	as[*ipxe.SecretError](codes.FailedPrecondition),
	as[*ipxe.EntryError](codes.FailedPrecondition),
	as[*appliance.ImageInSpecError](codes.FailedPrecondition),
	as[*appliance.ImagePinnedError](codes.FailedPrecondition),
	as[*appliance.ImageFailedError](codes.FailedPrecondition),
	as[*imagecache.FailedError](codes.FailedPrecondition),
	is(imagecache.ErrPinned, codes.FailedPrecondition),
	is(imagecache.ErrWanted, codes.FailedPrecondition),
	is(appliance.ErrNoAddress, codes.FailedPrecondition),
	is(lease.ErrNotCluster, codes.FailedPrecondition),
	as[*lease.EpochError](codes.FailedPrecondition),
	is(lease.ErrNotExternal, codes.FailedPrecondition),
	// What the request names does not exist.
	as[*appliance.ImageNotFoundError](codes.NotFound),
	is(imagecache.ErrNotFound, codes.NotFound),
	// A fixed bound would be passed.
	as[*site.LimitError](codes.ResourceExhausted),
	// The write may have been committed: not Unavailable, which callers
	// retry, applying it twice.
	is(lease.ErrOutcomeUnknown, codes.Unknown),
	// This appliance cannot serve it now; another may, or this one later.
	as[*appliance.StartingError](codes.Unavailable),
	is(ipxe.ErrFenced, codes.Unavailable),
	as[*lease.NotLeaderError](codes.Unavailable),
	as[*lease.ForwardError](codes.Unavailable),
	is(lease.ErrShutdown, codes.Unavailable),
	is(lease.ErrBusy, codes.Unavailable),
	// The caller's context ended.
	is(context.DeadlineExceeded, codes.DeadlineExceeded),
	is(context.Canceled, codes.Canceled),
}

// grpcError maps a domain error to the gRPC status the API returns, with the
// error's text as the message; a relay error by its code (relayStatus). A
// status error passes unchanged.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if re, ok := errors.AsType[*relayerr.Error](err); ok {
		return relayStatus(re)
	}
	for _, r := range codeTable {
		if r.matches(err) {
			return status.Error(r.code, err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}
