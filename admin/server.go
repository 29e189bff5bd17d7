package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/siteboot/siteboot/appliance"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Config configures a Server.
type Config struct {
	// Core is the appliance every RPC is handed to.
	Core *appliance.Appliance
	// Logger gets one line per refused or failed call.
	Logger *slog.Logger
	// Metrics registers siteboot_admin_* (nothing if nil).
	Metrics prometheus.Registerer
	// AdminGID is the group whose members may use the Unix socket besides
	// root; -1 admits root only. AdminGroup is its name, for messages.
	AdminGID   int
	AdminGroup string
}

// MaxMessageBytes bounds a request; larger ones are refused before decoding.
const MaxMessageBytes = 4 << 20

// Bounds on the TCP listener, which anyone who reaches it can dial.
const (
	// MaxTCPConns bounds the TCP connections served at once; more wait in
	// the kernel's backlog, unaccepted.
	MaxTCPConns = 64
	// TLSHandshakeTimeout bounds a TCP connection's TLS and HTTP/2
	// handshake (gRPC's own default is 120 s).
	TLSHandshakeTimeout = 5 * time.Second
)

// Server is the admin API.
type Server struct {
	sitebootv1.UnimplementedSiteBootServer
	cfg     Config
	core    *appliance.Appliance
	health  *health.Server
	metrics *metrics
}

// New returns a Server; it binds nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Core == nil || cfg.Logger == nil {
		return nil, errors.New("admin: Config needs Core and Logger")
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	h.SetServingStatus(sitebootv1.SiteBoot_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	return &Server{cfg: cfg, core: cfg.Core, health: h, metrics: m}, nil
}

// setServing marks the health service SERVING (or NOT_SERVING).
func (s *Server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(sitebootv1.SiteBoot_ServiceDesc.ServiceName, st)
}

func (s *Server) grpcServer(creds credentials.TransportCredentials, opts ...grpc.ServerOption) *grpc.Server {
	g := grpc.NewServer(append([]grpc.ServerOption{
		grpc.Creds(creds),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.ChainUnaryInterceptor(s.observe, s.authorize),
		grpc.ChainStreamInterceptor(s.authorizeStream),
	}, opts...)...)
	sitebootv1.RegisterSiteBootServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	return g
}

// ServeUnix serves the API on a Unix listener (see ListenUnix) until ctx
// ends. Peers are admitted by their kernel credentials.
func (s *Server) ServeUnix(ctx context.Context, l net.Listener) error {
	return s.serve(ctx, s.grpcServer(peerCredentials{}), l)
}

// ServeTLS serves the API on a TCP listener with mutual TLS until ctx ends.
// conf must require and verify client certificates. At most MaxTCPConns
// connections are served at once, each given TLSHandshakeTimeout to
// complete its handshakes.
func (s *Server) ServeTLS(ctx context.Context, l net.Listener, conf *tls.Config) error {
	if conf.ClientAuth != tls.RequireAndVerifyClientCert {
		return errors.New("admin: TCP listener needs mutual TLS (RequireAndVerifyClientCert)")
	}
	g := s.grpcServer(credentials.NewTLS(conf), grpc.ConnectionTimeout(TLSHandshakeTimeout))
	return s.serve(ctx, g, netutil.LimitListener(l, MaxTCPConns))
}

func (s *Server) serve(ctx context.Context, g *grpc.Server, l net.Listener) error {
	stopped := make(chan struct{})
	go func() {
		select {
		case <-s.core.Ready():
			s.setServing(true)
		case <-ctx.Done():
		case <-stopped:
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			stopGracefully(g, 5*time.Second)
		case <-stopped:
		}
	}()
	err := g.Serve(l)
	close(stopped)
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("admin: serve %s: %w", l.Addr(), err)
	}
	return nil
}

func stopGracefully(g *grpc.Server, within time.Duration) {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		g.Stop()
	}
}
