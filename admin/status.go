package admin

import (
	"context"
	"errors"

	"github.com/siteboot/siteboot/ipxe"
	"github.com/siteboot/siteboot/lease"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Status maps a domain error to the gRPC status the API returns. It is the
// only place that chooses codes.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var (
		field     *site.FieldError
		conflict  *site.ConflictError
		notReady  *site.NotReadyError
		limit     *site.LimitError
		notLeader *lease.NotLeaderError
		reqErr    *ipxe.RequestError
		secretErr *ipxe.SecretError
		entryErr  *ipxe.EntryError
	)
	switch {
	case errors.As(err, &field), errors.As(err, &reqErr):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.As(err, &conflict), errors.As(err, &notReady), errors.As(err, &secretErr), errors.As(err, &entryErr):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ipxe.ErrFenced):
		return status.Error(codes.Unavailable, err.Error())
	case errors.As(err, &limit):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.As(err, &notLeader), errors.Is(err, lease.ErrShutdown), errors.Is(err, lease.ErrBusy):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
