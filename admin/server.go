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
	agentv1 "github.com/siteboot/siteboot/gen/bettercompute/agent/v1"
	sitev1 "github.com/siteboot/siteboot/gen/bettercompute/site/v1"
	sitebootv1 "github.com/siteboot/siteboot/gen/siteboot/v1"
	"github.com/siteboot/siteboot/images"
	"github.com/siteboot/siteboot/site"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// LeaseInfo is what the API reports about the boot lease and raft.
type LeaseInfo interface {
	LeaseState() *sitev1.BootLeaseState
	Mode() string
	RaftState() string
	AppliedIndex() uint64
}

// Discovered is the discovered-machine ledger (discovery.Ledger).
type Discovered interface {
	List() []*agentv1.DiscoveredMachine
	Count() int
}

// Scripts renders what /ipxe would answer (ipxe.Server via a base URL).
type Scripts interface {
	Render(ctx context.Context, req *sitev1.IpxeScriptRequest) (*sitev1.IpxeScript, error)
}

// BootFiles are the first-stage boot files (images.Set).
type BootFiles interface {
	Files() []images.File
	Dir() string
}

// Keys is the node key that signs assertions (discovery.Signer).
type Keys interface {
	KID() string
	PublicKeyPEM() []byte
}

// Config configures a Server.
type Config struct {
	Store *site.Store
	Lease LeaseInfo
	// Discovered, Scripts, BootFiles and Keys back the boot-path RPCs and
	// status fields; Listeners reports the network services. All optional.
	Discovered Discovered
	Scripts    Scripts
	BootFiles  BootFiles
	Keys       Keys
	Listeners  func() []*sitebootv1.Listener
	// Cache is the image cache; SyncImages hands it the replicated wanted
	// images (called after every change the API makes). Optional.
	Cache      Cache
	SyncImages func() error
	// SiteID, NodeID and Version are reported by GetStatus.
	SiteID, NodeID, Version string
	StartedAt               time.Time
	Now                     func() time.Time
	Logger                  *slog.Logger
	Metrics                 prometheus.Registerer
	// AdminGID is the group whose members may use the Unix socket besides
	// root; -1 admits root only. AdminGroup is its name, for messages.
	AdminGID   int
	AdminGroup string
}

// MaxMessageBytes bounds a request; larger ones are refused before decoding.
const MaxMessageBytes = 4 << 20

// Server is the admin API.
type Server struct {
	sitebootv1.UnimplementedSiteBootServer
	cfg     Config
	health  *health.Server
	metrics *metrics
}

// New returns a Server; it binds nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Lease == nil || cfg.Logger == nil || cfg.Now == nil {
		return nil, errors.New("admin: Config needs Store, Lease, Logger and Now")
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	h.SetServingStatus(sitebootv1.SiteBoot_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	return &Server{cfg: cfg, health: h, metrics: m}, nil
}

// SetServing marks the health service SERVING (or NOT_SERVING).
func (s *Server) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(sitebootv1.SiteBoot_ServiceDesc.ServiceName, st)
}

func (s *Server) grpcServer(creds credentials.TransportCredentials) *grpc.Server {
	g := grpc.NewServer(
		grpc.Creds(creds),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.ChainUnaryInterceptor(s.observe, s.authorize),
		grpc.ChainStreamInterceptor(s.authorizeStream),
	)
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
// conf must require and verify client certificates.
func (s *Server) ServeTLS(ctx context.Context, l net.Listener, conf *tls.Config) error {
	if conf.ClientAuth != tls.RequireAndVerifyClientCert {
		return errors.New("admin: TCP listener needs mutual TLS (RequireAndVerifyClientCert)")
	}
	return s.serve(ctx, s.grpcServer(credentials.NewTLS(conf)), l)
}

func (s *Server) serve(ctx context.Context, g *grpc.Server, l net.Listener) error {
	stopped := make(chan struct{})
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
