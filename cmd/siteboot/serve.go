package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/siteboot/siteboot/admin"
	"github.com/siteboot/siteboot/lease"
	"github.com/siteboot/siteboot/site"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
)

type serveFlags struct {
	config, dataDir, socket, httpListen, siteID, nodeID, logLevel string
}

func newServeCmd(getenv env) *cobra.Command {
	var f serveFlags
	c := &cobra.Command{
		Use:   "serve [--config FILE] [--data-dir DIR] [--admin-socket PATH] [--http-listen ADDR]",
		Short: "Run the appliance",
		Long: `Run the appliance: the replicated state (raft, in the data dir), the admin
API on a Unix socket, and the HTTP endpoints /healthz, /readyz and /metrics.

With no config file and no flags it starts with its embedded defaults: data in
/var/lib/siteboot as root (./siteboot-data otherwise), the admin socket inside
it, HTTP on :8080, a single-voter raft that holds the boot lease.

Configuration comes from the YAML file (--config), then SITEBOOT_* environment
variables, then flags; each overrides the one before. Keys:

` + configReference(),
		Example: `  siteboot serve
  siteboot serve --data-dir /srv/siteboot --http-listen 10.0.0.2:8080
  SITEBOOT_SITE_ID=fra1 siteboot serve --config /etc/siteboot/siteboot.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(f.config, getenv)
			if err != nil {
				return err
			}
			f.apply(cmd, &cfg)
			if err := cfg.finish(); err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), cfg.Log.Level, cfg.Log.Format)
			if err != nil {
				return err
			}
			return serve(cmd.Context(), cfg, log)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.config, "config", "", "YAML config file")
	fl.StringVar(&f.dataDir, "data-dir", "", "state directory (data_dir)")
	fl.StringVar(&f.socket, "admin-socket", "", "admin API Unix socket (admin.socket)")
	fl.StringVar(&f.httpListen, "http-listen", "", "HTTP address (http.listen)")
	fl.StringVar(&f.siteID, "site-id", "", "site id (site_id)")
	fl.StringVar(&f.nodeID, "node-id", "", "this appliance's node id (node_id)")
	fl.StringVar(&f.logLevel, "log-level", "", "debug, info, warn, error (log.level)")
	return c
}

// apply lets flags that were set win over file and environment.
func (f *serveFlags) apply(cmd *cobra.Command, cfg *Config) {
	set := func(name string, dst *string, v string) {
		if cmd.Flags().Changed(name) {
			*dst = v
		}
	}
	set("data-dir", &cfg.DataDir, f.dataDir)
	set("admin-socket", &cfg.Admin.Socket, f.socket)
	set("http-listen", &cfg.HTTP.Listen, f.httpListen)
	set("site-id", &cfg.SiteID, f.siteID)
	set("node-id", &cfg.NodeID, f.nodeID)
	set("log-level", &cfg.Log.Level, f.logLevel)
}

// serve runs the appliance until ctx ends.
func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := prepareDataDir(cfg.DataDir, lookupGroup(cfg.Admin.Group)); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{Name: "siteboot_build_info", Help: "Always 1; labels say which build runs.",
		ConstLabels: prometheus.Labels{"version": version, "site_id": cfg.SiteID, "node_id": cfg.NodeID}})
	buildInfo.Set(1)
	reg.MustRegister(buildInfo)

	state := site.NewState()
	node, err := lease.Open(lease.Config{
		Dir: filepath.Join(cfg.DataDir, "raft"), ID: cfg.NodeID, Bind: cfg.Raft.Listen,
		TTL: time.Duration(cfg.Lease.TTL), StateMachine: state, Logger: log,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := node.Close(); err != nil {
			log.Warn("raft shutdown", "err", err)
		}
	}()
	if err := node.RegisterMetrics(reg); err != nil {
		return err
	}
	if err := site.RegisterMetrics(reg, state, time.Now); err != nil {
		return err
	}
	store := site.NewStore(site.StoreConfig{
		State: state, Applier: node, Now: time.Now, Logger: log,
		Limits: site.Limits{DefaultTTL: time.Duration(cfg.Entries.DefaultTTL), MaxTTL: time.Duration(cfg.Entries.MaxTTL)},
	})
	api, err := admin.New(admin.Config{
		Store: store, Lease: node, SiteID: cfg.SiteID, NodeID: cfg.NodeID, Version: version,
		StartedAt: time.Now(), Now: time.Now, Logger: log, Metrics: reg,
		AdminGID: lookupGroup(cfg.Admin.Group), AdminGroup: cfg.Admin.Group,
	})
	if err != nil {
		return err
	}
	sock, err := admin.ListenUnix(cfg.Admin.Socket, lookupGroup(cfg.Admin.Group))
	if err != nil {
		return err
	}
	httpLn, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		sock.Close()
		return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return node.Run(ctx) })
	g.Go(func() error { return api.ServeUnix(ctx, sock) })
	if cfg.Admin.TCPListen != "" {
		if err := serveAdminTLS(ctx, g, cfg, api); err != nil {
			sock.Close()
			httpLn.Close()
			return err
		}
	}
	g.Go(func() error { return serveHTTP(ctx, httpLn, httpMux(reg, node), log) })
	g.Go(func() error { store.RunJanitor(ctx, 30*time.Second); return nil })
	g.Go(func() error {
		select {
		case <-node.Ready():
			api.SetServing(true)
			epoch, _ := node.Gate()
			log.Info("siteboot ready", "site", cfg.SiteID, "node", cfg.NodeID, "version", version, "epoch", epoch,
				"admin_socket", cfg.Admin.Socket, "http", httpLn.Addr().String(), "data_dir", cfg.DataDir)
		case <-ctx.Done():
		}
		return nil
	})
	err = g.Wait()
	log.Info("siteboot stopped")
	return err
}

// prepareDataDir creates the data dir with mode 0750, group gid if ≥ 0, so
// admin-group members can reach the socket inside it and nobody else can.
func prepareDataDir(dir string, gid int) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	if gid >= 0 {
		if err := os.Chown(dir, -1, gid); err != nil {
			return fmt.Errorf("data_dir: chown to gid %d: %w", gid, err)
		}
	}
	return nil
}

func serveAdminTLS(ctx context.Context, g *errgroup.Group, cfg Config, api *admin.Server) error {
	conf, err := serverTLS(cfg.Admin.TLS.Cert, cfg.Admin.TLS.Key, cfg.Admin.TLS.ClientCA)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Admin.TCPListen)
	if err != nil {
		return fmt.Errorf("admin.tcp_listen %s: %w", cfg.Admin.TCPListen, err)
	}
	g.Go(func() error { return api.ServeTLS(ctx, ln, conf) })
	return nil
}

func serverTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("admin.tls.cert/admin.tls.key: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("admin.tls.client_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("admin.tls.client_ca %s: no PEM certificate found", caFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13,
	}, nil
}

// readiness is what /readyz needs to know.
type readiness interface {
	Gate() (uint64, bool)
	Ready() <-chan struct{}
	RaftState() string
}

func httpMux(reg *prometheus.Registry, node readiness) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-node.Ready():
		default:
			http.Error(w, "not ready: the boot lease was never held yet (raft "+node.RaftState()+")", http.StatusServiceUnavailable)
			return
		}
		epoch, open := node.Gate()
		fmt.Fprintf(w, "ready: lease active=%t epoch=%d\n", open, epoch)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("http listening", "addr", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http: %w", err)
	}
	return nil
}

func newLogger(w interface{ Write([]byte) (int, error) }, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
