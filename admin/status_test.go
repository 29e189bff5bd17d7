package admin

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/siteboot/siteboot/ipxe"
	"github.com/siteboot/siteboot/lease"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStatusMapping(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{&site.FieldError{Field: "entries[0].mac", Reason: "bad"}, codes.InvalidArgument},
		{fmt.Errorf("wrapped: %w", &site.FieldError{Field: "f", Reason: "r"}), codes.InvalidArgument},
		{&site.ConflictError{Field: "entries[0].mac", MAC: "m", Owner: "o"}, codes.FailedPrecondition},
		{&site.LimitError{Reason: "full"}, codes.ResourceExhausted},
		{&lease.NotLeaderError{Leader: "b"}, codes.Unavailable},
		{lease.ErrShutdown, codes.Unavailable},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{&site.NotReadyError{Field: "entries[0].sanboot_sha256", Digest: "ab"}, codes.FailedPrecondition},
		{&ipxe.RequestError{Field: "mac", Reason: "bad"}, codes.InvalidArgument},
		{ipxe.ErrFenced, codes.Unavailable},
		{&ipxe.SecretError{Ref: "env://X", Err: errors.New("unset")}, codes.FailedPrecondition},
		{&ipxe.EntryError{MAC: "m", Reason: "r"}, codes.FailedPrecondition},
		{errors.New("boom"), codes.Internal},
		{status.Error(codes.NotFound, "kept"), codes.NotFound},
	}
	for _, tt := range tests {
		got := Status(tt.err)
		if status.Code(got) != tt.want {
			t.Errorf("Status(%v) = %v, want %v", tt.err, status.Code(got), tt.want)
		}
		want := tt.err.Error()
		if st, ok := status.FromError(tt.err); ok {
			want = st.Message()
		}
		if msg := status.Convert(got).Message(); msg != want {
			t.Errorf("Status(%v) message = %q; want the error text unchanged", tt.err, msg)
		}
	}
	if Status(nil) != nil {
		t.Error("Status(nil) != nil")
	}
}

func TestPeerCredAllowed(t *testing.T) {
	tests := []struct {
		pc   PeerCred
		gid  int
		want bool
	}{
		{PeerCred{UID: 0, GID: 5}, -1, true},
		{PeerCred{UID: 1000, GID: 1000}, -1, false},
		{PeerCred{UID: 1000, GID: 1000}, 1000, true},
		{PeerCred{UID: 1000, GID: 1000, Groups: []uint32{27, 998}}, 998, true},
		{PeerCred{UID: 1000, GID: 1000, Groups: []uint32{27}}, 998, false},
	}
	for _, tt := range tests {
		if got := tt.pc.Allowed(tt.gid); got != tt.want {
			t.Errorf("%+v.Allowed(%d) = %t, want %t", tt.pc, tt.gid, got, tt.want)
		}
	}
}
