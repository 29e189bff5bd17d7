package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/siteboot/siteboot/admin"
	"github.com/siteboot/siteboot/appliance"
	"github.com/siteboot/siteboot/internal/sdnotify"
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

It runs with two Go processors per CPU (GOMAXPROCS), so that DHCP and TFTP
answers do not wait behind long sendfile calls; set GOMAXPROCS to choose.

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
			if err := cfg.Finish(); err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), cfg.Log.Level, cfg.Log.Format)
			if err != nil {
				return err
			}
			n, wd, err := sdnotify.FromEnv(getenv, os.Getpid())
			if err != nil {
				return err
			}
			m := manager{watchdog: wd}
			if n != nil {
				m.notify = n
			}
			if from, to := raiseProcs(getenv); to != from {
				log.Info("scheduler: Go processors raised for latency under load (set GOMAXPROCS to choose)",
					"gomaxprocs", to, "cpus", from)
			}
			return serveManaged(cmd.Context(), cfg, log, m)
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

// serve runs the appliance and its admin API until ctx ends: the core
// (package appliance) with its network services, the API on the Unix
// socket, and on TCP with mutual TLS when admin.tcp_listen is set.
func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	return serveManaged(ctx, cfg, log, manager{})
}

// serveManaged is serve under a service manager: with m.notify set it
// reports readiness, watchdog pings and the stop to it (tellManager).
func serveManaged(ctx context.Context, cfg Config, log *slog.Logger, m manager) error {
	core, err := appliance.Open(ctx, cfg, log, version)
	if err != nil {
		return err
	}
	defer core.Close()
	gid := appliance.LookupGroup(cfg.Admin.Group)
	api, err := admin.New(admin.Config{Core: core, Logger: log, Metrics: core.Registry(), AdminGID: gid, AdminGroup: cfg.Admin.Group})
	if err != nil {
		return err
	}
	sock, err := admin.ListenUnix(cfg.Admin.Socket, gid)
	if err != nil {
		return err
	}
	defer sock.Close()
	g, ctx := errgroup.WithContext(ctx)
	if cfg.Admin.TCPListen != "" {
		ln, conf, err := listenAdminTLS(cfg)
		if err != nil {
			return err
		}
		g.Go(func() error { return api.ServeTLS(ctx, ln, conf) })
	}
	g.Go(func() error { return core.Run(ctx) })
	g.Go(func() error { return api.ServeUnix(ctx, sock) })
	if m.notify != nil {
		g.Go(func() error { tellManager(ctx, core, m, log); return nil })
	}
	return g.Wait()
}

// listenAdminTLS binds admin.tcp_listen with the mutual TLS configuration
// of admin.tls.*.
func listenAdminTLS(cfg Config) (net.Listener, *tls.Config, error) {
	conf, err := serverTLS(cfg.Admin.TLS.Cert, cfg.Admin.TLS.Key, cfg.Admin.TLS.ClientCA)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", cfg.Admin.TCPListen)
	if err != nil {
		return nil, nil, fmt.Errorf("admin.tcp_listen %s: %w", cfg.Admin.TCPListen, err)
	}
	return ln, conf, nil
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

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
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
