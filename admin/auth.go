package admin

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// check admits a call only from a peer whose identity a listener proved:
// a Unix-socket peer that is root or in the admin group, or a TCP peer whose
// client certificate verified against the admin CA. Anything else — no peer
// information, another kind of credentials, a TLS peer without a verified
// chain — is refused: the check fails closed.
func (s *Server) check(ctx context.Context) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Error(codes.PermissionDenied, "admin: no peer information")
	}
	switch ai := p.AuthInfo.(type) {
	case PeerCred:
		return s.checkPeerCred(ai)
	case credentials.TLSInfo:
		if len(ai.State.VerifiedChains) > 0 {
			return nil
		}
		return status.Error(codes.PermissionDenied, "admin: TLS peer without a verified client certificate")
	default:
		return status.Error(codes.PermissionDenied, "admin: peer identity unknown: only the admin socket and mutual TLS admit callers")
	}
}

// requireRoot admits only root on the admin socket: what only root may see
// (a discovery token, a signature on demand) is not for the admin group,
// nor for a TLS client, whose certificate proves membership of the admin
// CA's set and no more.
func requireRoot(ctx context.Context) error {
	if p, ok := peer.FromContext(ctx); ok {
		if pc, ok := p.AuthInfo.(PeerCred); ok && pc.UID == 0 {
			return nil
		}
	}
	return status.Error(codes.PermissionDenied, "reveal_secrets: only root on the admin socket may reveal discovery tokens and signatures")
}

func (s *Server) checkPeerCred(pc PeerCred) error {
	if pc.Allowed(s.cfg.AdminGID) {
		return nil
	}
	s.cfg.Logger.Warn("admin socket peer refused", "uid", pc.UID, "gid", pc.GID, "pid", pc.PID)
	if s.cfg.AdminGID < 0 {
		return status.Errorf(codes.PermissionDenied, "admin socket: uid %d is not root (group %q does not exist here)", pc.UID, s.cfg.AdminGroup)
	}
	return status.Errorf(codes.PermissionDenied, "admin socket: uid %d is neither root nor in group %q", pc.UID, s.cfg.AdminGroup)
}

func (s *Server) authorize(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return next(ctx, req)
}

func (s *Server) authorizeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	if err := s.check(ss.Context()); err != nil {
		return err
	}
	return next(srv, ss)
}

// observe counts and logs every call; refusals are logged with their reason.
func (s *Server) observe(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := next(ctx, req)
	err = grpcError(err)
	code := status.Code(err)
	s.metrics.requests.WithLabelValues(info.FullMethod, code.String()).Inc()
	s.metrics.latency.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
	switch code {
	case codes.OK:
		s.cfg.Logger.Debug("admin call", "method", info.FullMethod, "took", time.Since(start))
	case codes.Internal, codes.Unknown:
		s.cfg.Logger.Error("admin call failed", "method", info.FullMethod, "code", code, "err", status.Convert(err).Message())
	default:
		s.cfg.Logger.Info("admin call refused", "method", info.FullMethod, "code", code, "err", status.Convert(err).Message())
	}
	return resp, err
}
