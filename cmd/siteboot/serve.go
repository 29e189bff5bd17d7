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
