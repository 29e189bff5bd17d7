package admin

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

func (s *Server) check(ctx context.Context) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Error(codes.PermissionDenied, "admin: no peer information")
	}
	pc, ok := p.AuthInfo.(PeerCred)
	if !ok {
		// TCP peers passed the mutual TLS handshake already.
		return nil
	}
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
	err = Status(err)
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
